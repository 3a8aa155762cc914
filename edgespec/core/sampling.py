"""The one sampling transform: a logits row -> the distribution sampling uses.

Target rows (p) and draft rows (q) go through the *same* function with the
*same* parameters; that is what makes speculative decoding lossless.
Distributions are sparse (`Dist`: token ids and their probabilities), because
after top-k / top-p / min-p only a few dozen tokens keep any mass, and copying
or normalising a whole 50k-entry row per token is the per-step cost we avoid.
Temperature 0 is greedy: a one-hot distribution on the argmax, so greedy and
sampled decoding share one code path.

Order follows llama.cpp's default chain: top-k, top-p, min-p on the
untempered logits, then temperature, then softmax over the survivors.
Pure numpy; the RNG is always injected.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import defaults


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = defaults.TEMPERATURE
    top_k: int = defaults.TOP_K  # <= 0: disabled
    top_p: float = defaults.TOP_P  # >= 1: disabled
    min_p: float = defaults.MIN_P  # <= 0: disabled
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


class Dist:
    """A sparse probability distribution: `probs[j]` is the mass of `ids[j]`.

    Ids are unique; probs sum to 1. Tokens not listed have probability 0.
    """

    __slots__ = ("ids", "probs", "_cdf")

    def __init__(self, ids: np.ndarray, probs: np.ndarray) -> None:
        self.ids = ids
        self.probs = probs
        self._cdf: np.ndarray | None = None

    @classmethod
    def one_hot(cls, token: int) -> Dist:
        return cls(np.array([token], dtype=np.int64), np.ones(1))

    def prob(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def sample(self, rng: np.random.Generator) -> int:
        if self.ids.size == 1:
            return int(self.ids[0])
        if self._cdf is None:
            self._cdf = np.cumsum(self.probs)
        u = rng.random() * self._cdf[-1]
        j = int(np.searchsorted(self._cdf, u, side="right"))
        return int(self.ids[min(j, self.ids.size - 1)])

    def dense(self, n_vocab: int) -> np.ndarray:
        out = np.zeros(n_vocab)
        out[self.ids] = self.probs
        return out


def to_dist(logits: np.ndarray, params: SamplingParams) -> Dist:
    """Turn one logits row (any float dtype, length n_vocab) into a Dist."""
    if params.greedy:
        return Dist.one_hot(int(np.argmax(logits)))
    n = logits.shape[0]
    k = params.top_k if 0 < params.top_k < n else n
    if k < n:
        ids = np.argpartition(logits, n - k)[n - k :]
    else:
        ids = np.arange(n)
    vals = logits[ids].astype(np.float64)
    order = np.argsort(-vals, kind="stable")
    ids, vals = ids[order], vals[order]
    # top-p and min-p look at the untempered distribution, as llama.cpp does.
    probs = np.exp(vals - vals[0])
    probs /= probs.sum()
    keep = ids.size
    if params.top_p < 1.0:
        # smallest prefix whose mass reaches top_p (at least one token)
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1)
    if params.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(probs >= params.min_p * probs[0])))
    keep = max(keep, 1)
    ids, vals = ids[:keep], vals[:keep]
    scaled = np.exp((vals - vals[0]) / params.temperature)
    return Dist(ids.astype(np.int64), scaled / scaled.sum())


def confidence(logits: np.ndarray, dist: Dist, params: SamplingParams) -> float:
    """How sure the model is of its best token: the top probability of `dist`, or at
    temperature 0 (where `dist` is one-hot) of the untempered softmax of the row."""
    if not params.greedy:
        return float(dist.probs.max())
    top = float(logits.max())
    return 1.0 / float(np.exp(logits - top).sum())
