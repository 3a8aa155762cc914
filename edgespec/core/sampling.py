"""The one sampling transform: a logits row -> the distribution sampling uses.

Target rows (p) and draft rows (q) go through the *same* function with the
*same* parameters; that is what makes speculative decoding lossless.
Distributions are sparse (`Dist`: token ids and their probabilities), because
after top-k / top-p / min-p only a few dozen tokens keep any mass, and copying
or normalising a whole 150k-entry row per token is the per-step cost we avoid.
Temperature 0 is greedy: a one-hot distribution on the argmax, so greedy and
sampled decoding share one code path.

Order follows llama.cpp's default chain: logit bias and penalties (which
depend on the history: penalties.py, applied by the decoder before to_dist),
then top-k, top-p, min-p on the untempered logits, then temperature, then
softmax over the survivors.
Pure numpy; the RNG is always injected.

The definition sorts the k largest logits (the whole row when top-k is off)
and cuts; at 150k-260k vocabularies that sort is most of a row's cost. So
to_dist first tries paths that sort only a head of the row (found from column
maxima for top-k, from the row's total weight for top-p / min-p) and return
exactly the definition's Dist: the same ids in the same order, the same
probabilities. Where they cannot show that (ties whose order only the full
partition decides, a cut within rounding of top_p or min_p, NaN or inf), the
definition runs. tests/test_sampling_exact.py holds the definition's original
code and compares the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import defaults
from .penalties import Penalties


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = defaults.TEMPERATURE
    top_k: int = defaults.TOP_K  # <= 0: disabled
    top_p: float = defaults.TOP_P  # >= 1: disabled
    min_p: float = defaults.MIN_P  # <= 0: disabled
    seed: int | None = None
    # applied before the rest, with the row's history (penalties.History), to p and q alike
    penalties: Penalties = Penalties()

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
    kept = _top_k_head(logits, k, params) if k < n else _untruncated_head(logits, params)
    if kept is None:
        ids, vals = _sorted_top(logits, k)
        keep = _keep(vals, params)
        kept = ids[:keep], vals[:keep]
    ids, vals = kept
    scaled = np.exp((vals - vals[0]) / params.temperature)
    return Dist(ids.astype(np.int64), scaled / scaled.sum())


def prob_of(logits: np.ndarray, token: int, params: SamplingParams) -> float:
    """to_dist(logits, params).prob(token), without listing every token where nothing is cut
    (top_k, top_p and min_p all off: a softmax at the token)."""
    if params.greedy:
        return float(int(np.argmax(logits)) == token)
    n = logits.shape[0]
    if 0 < params.top_k < n or params.top_p < 1.0 or params.min_p > 0.0:
        return to_dist(logits, params).prob(token)
    weights = logits.astype(np.float64)
    weights -= float(weights.max())
    weights /= params.temperature
    np.exp(weights, out=weights)
    return float(weights[token] / weights.sum())


# The definition: sort the k largest logits, cut. The fast paths below return exactly
# what this returns, or None when they cannot show that they would.


def _sorted_top(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest logits (all when k == n), descending, ties in np.argpartition's then stable order."""
    n = logits.shape[0]
    ids = np.argpartition(logits, n - k)[n - k :] if k < n else np.arange(n)
    vals = logits[ids].astype(np.float64)
    order = np.argsort(-vals, kind="stable")
    return ids[order], vals[order]


def _keep(vals: np.ndarray, params: SamplingParams) -> int:
    """How many of the sorted top-k `vals` survive top-p and min-p."""
    # top-p and min-p look at the untempered distribution, as llama.cpp does.
    probs = np.exp(vals - vals[0])
    probs /= probs.sum()
    keep = vals.size
    if params.top_p < 1.0:
        # smallest prefix whose mass reaches top_p (at least one token)
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1)
    if params.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(probs >= params.min_p * probs[0])))
    return max(keep, 1)


def _top_k_head(logits: np.ndarray, k: int, params: SamplingParams) -> tuple[np.ndarray, np.ndarray] | None:
    """Top-k without partitioning the whole row: a threshold that at least k logits reach
    comes from the maxima of a few thousand strided columns, so only the tokens above it
    (k and a few more) are sorted. The sorted values, and so the cut, are the definition's
    to the bit; only the ids of tied values depend on np.argpartition's internals, so a
    tie among the kept tokens (or with the next one) goes the definition's way."""
    n = logits.shape[0]
    group = max(1, min(64, n // (4 * k)))  # n // group >= 4k columns: the k-th largest maximum is a good bar
    cols = n // group
    body, rest = logits[: group * cols].reshape(group, cols), logits[group * cols :]
    col_max = body.max(axis=0)
    top = np.maximum(col_max.max(), rest.max()) if rest.size else col_max.max()  # (Python's max drops a NaN)
    if not np.isfinite(top):  # NaN or +inf: leave the result to the definition
        return None
    bar = np.partition(col_max, cols - k)[cols - k]  # k distinct column maxima reach it
    if bar > -np.inf:
        hot = np.flatnonzero(col_max >= bar)  # only these columns hold logits >= bar: search just them
        at, col = np.nonzero(body[:, hot] >= bar)
        ids = at * cols + hot[col]
        if rest.size:
            ids = np.concatenate((ids, group * cols + np.flatnonzero(rest >= bar)))
    else:  # under k columns hold a finite logit (a grammar or a logit bias masked the rest)
        ids = np.flatnonzero(logits > bar)
    if ids.size > 4 * k + 1024:
        return None  # many logits tie at the bar: their order is np.argpartition's
    vals = logits[ids].astype(np.float64)
    order = np.argsort(-vals, kind="stable")
    ids, vals = ids[order], vals[order]
    if vals.size <= k:  # the row's next values are below the bar, or -inf like it
        vals = np.concatenate((vals, np.full(k + 1 - vals.size, -np.inf)))
    keep = _keep(vals[:k], params)
    edge = vals[: keep + 1]
    if (edge[1:] == edge[:-1]).any():
        return None
    return ids[:keep], vals[:keep]


# How close a running mass may come to top_p (or a token's weight to min_p) before sums over
# the head alone could round to the other side of the full sort's: far above the rounding of
# either (a float64 sum of n terms of at most 1 is off by under n * 1.2e-16).
_SLACK = 1e-9
# A head this short is sorted as it is: narrowing it further costs more than the sort saves.
_SHORT_HEAD = 2048
# Without min-p, the first head tried: in a confident row these few nats hold the top-p mass.
_GUESS_DEPTH = 8.0


def _untruncated_head(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray] | None:
    """Top-p / min-p over the whole row without sorting it: one pass gives every token's weight
    and their sum (the definition's normaliser), a few more find a depth below the top that
    holds every token the cuts may keep; only those are sorted. Min-p alone needs no sum (its
    cut is relative to the top). With min-p on, the sum is taken in float32 first
    (`_weights32`: several times faster where numpy's float64 exp has no SIMD path, as on
    AVX2), with its error bound added to the top-p slack; a cut within that bound is decided
    by float64 weights. Top-p alone keeps thousands of tokens, whose cumulative masses lie
    closer together than that bound: there float32 would mostly be paid twice."""
    if params.top_p >= 1.0 and params.min_p <= 0.0:
        return None  # every token is kept, and listing them in order is the full sort
    top = logits.max()
    if not np.isfinite(top) or not (params.min_p <= 0.0 or 1e-200 <= params.min_p <= 1.0):
        return None  # (a tinier min_p underflows in the definition; a larger one keeps just the top)
    if params.top_p >= 1.0:
        return _head(logits, top, None, 0.0, params, _SLACK)
    band = None
    if params.min_p > 0.0:
        kept, band = _min_p_first(logits, top, params)
        if kept is not None:
            return kept
    if logits.dtype == np.float32 and params.min_p > 0.0:  # (top-p alone keeps thousands: cuts too dense)
        weights, error = _weights32(logits, top)
        kept = _head(logits, top, weights, float(weights.sum(dtype=np.float64)), params, _SLACK + error, band)
        if kept is not None:
            return kept
    weights = _weights64(logits, top)
    return _head(logits, top, weights, float(weights.sum()), params, _SLACK, band)


# How deep below the top `_min_p_first` looks for the weight that shows top-p cuts no sooner than
# min-p: on real rows (SmolLM2 at T = 0.8) min-p decides in 98% of them and 6 nats show it in all.
_BAND = 6.0


def _min_p_first(
    logits: np.ndarray, top: np.generic, params: SamplingParams
) -> tuple[tuple[np.ndarray, np.ndarray] | None, np.ndarray]:
    """Min-p's kept tokens where top-p provably cuts no sooner (else None), and the ascending
    ids of the band looked at (every token min-p may keep is in it). Top-p keeps at least the
    tokens whose mass before them is under top_p; that mass over the row's total weight is at
    most the same mass over the weight of any part of the row, so the tokens within `_BAND`
    nats of the top (few, in a real row) show it without the exp of the whole row."""
    depth = max(_BAND, -math.log(params.min_p)) + 1e-6
    band = np.flatnonzero(logits >= _floor(float(top) - depth, logits.dtype))
    if band.size > _SHORT_HEAD:
        return None, band
    ids, vals = _by_logit(logits, band)
    weights = np.exp(vals - vals[0])
    if np.any(np.abs(weights - params.min_p) <= _SLACK * params.min_p):
        return None, band
    by_min = int(np.count_nonzero(weights >= params.min_p))
    if float(weights[: by_min - 1].sum()) >= (params.top_p - _SLACK) * float(weights.sum()):
        return None, band  # top-p may cut first: its cut needs the whole row's weight
    return (ids[:by_min], vals[:by_min]), band


def _weights64(logits: np.ndarray, top: np.generic) -> np.ndarray:
    """exp(logits - top) in float64, as the definition computes them (vals - vals[0]); one
    array for the whole row: a second one costs more in page faults than the exp."""
    weights = logits.astype(np.float64)
    weights -= float(top)
    return np.exp(weights, out=weights)


# numpy's float32 exp is within 2.52 units in the last place (its SIMD code; libm's expf within
# 1): 8 rounding units (2^-24 each) bound it with room to spare
_EXP32_UNITS = 8.0
_UNIT32 = 2.0**-24
_DEEP32 = 88.0  # past this depth exp in float32 is subnormal or 0: off by a few units of 2^-149 absolute


def _weights32(logits: np.ndarray, top: np.generic) -> tuple[np.ndarray, float]:
    """exp(logits - top) in float32, and a bound on the relative error of their sum. Each
    weight is off by the rounding of its depth d = top - logit (|d| units of 2^-24 in the
    exponent, so relatively) and the exp's own (_EXP32_UNITS); a token deeper than _DEEP32 by
    at most 2^-140 (a few subnormal units), against a sum of at least 1 (the top's own weight, exp(0) = 1 exactly)."""
    weights = np.subtract(logits, top)
    depth = min(-float(weights.min()), _DEEP32)  # -inf (a masked token) weighs exactly 0
    np.exp(weights, out=weights)
    return weights, (depth + _EXP32_UNITS) * _UNIT32 + logits.shape[0] * 2.0**-140


def _head(
    logits: np.ndarray,
    top: np.generic,
    weights: np.ndarray | None,
    total: float,
    params: SamplingParams,
    slack: float,
    band: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The kept tokens from a head of the row (see _head_ids), or None where `_certain_keep`
    cannot decide the cut from it; `total` is the row's weight within `slack` relatively."""
    ids, whole_min_p = _head_ids(logits, top, weights, total, params, slack, band)
    ids, vals = _by_logit(logits, ids)
    keep = _certain_keep(vals, total, params, whole_min_p, logits.shape[0], slack)
    return None if keep is None else (ids[:keep], vals[:keep])


def _head_ids(
    logits: np.ndarray,
    top: np.generic,
    weights: np.ndarray | None,
    total: float,
    params: SamplingParams,
    slack: float,
    band: np.ndarray | None = None,
) -> tuple[np.ndarray, bool]:
    """Ascending ids of the tokens down to some depth below the top (so a prefix of the sorted
    row, ties included) that hold every token top-p and min-p keep; and whether they hold every
    token that passes min-p. `weights` (exp(logit - top), summing to `total` within `slack`)
    may be None for min-p alone; `band`, ascending ids of every token as deep as min-p keeps
    and deeper, narrows the search for them."""
    target = (params.top_p + 2 * slack) * total
    if params.min_p > 0.0:
        # deeper tokens weigh less than min_p of the top
        bar = _floor(float(top) + math.log(params.min_p) - 1e-6, logits.dtype)
        ids = np.flatnonzero(logits >= bar) if band is None else band[logits[band] >= bar]
        if weights is None or params.top_p >= 1.0 or ids.size <= _SHORT_HEAD or weights[ids].sum() < target:
            return ids, True  # top-p cuts inside it, or not before min-p does
        return ids[_top_p_band(top - logits[ids], weights[ids], target)], False
    assert weights is not None  # top-p is on (else min-p is, above)
    near = logits >= _floor(float(top) - _GUESS_DEPTH, logits.dtype)
    if np.count_nonzero(near) <= _SHORT_HEAD:
        ids = np.flatnonzero(near)
        if weights[ids].sum() >= target:
            return ids, False
    # Each token deeper than d weighs under e^-d: below the depth where n such tokens weigh less
    # than top-p may leave out, none is kept. Cheaper to band just the tokens above it, when few.
    spare = total - target
    if spare > 0.0:
        near = logits >= _floor(float(top) - max(0.0, math.log(logits.size / spare)), logits.dtype)
        if np.count_nonzero(near) <= logits.size // 2:
            ids = np.flatnonzero(near)
            return ids[_top_p_band(top - logits[ids], weights[ids], target)], False
    return _top_p_band(top - logits, weights, target), False


def _top_p_band(depth: np.ndarray, weights: np.ndarray, target: float) -> np.ndarray:
    """Positions of the tokens no deeper than the shallowest band of depths whose mass, with
    every shallower band's, reaches `target` (all of them if none does): one bincount, no sort."""
    # The bits of a non-negative float32 grow with it: the top 15 cut the depth into bands
    # 1/64 of an octave wide. Any rounding on the way keeps the order, so a band bound is a
    # logit bound and the head stays a prefix of the sorted row, ties included.
    with np.errstate(over="ignore"):  # depths past float32's range become inf, still in order
        depth = depth.astype(np.float32, copy=False) + np.float32(0.0)  # -0.0 (a -0.0 top, a 0.0 token) is 0.0
    bands = depth.view(np.int32) >> 17
    mass = np.cumsum(np.bincount(bands, weights=weights))
    last = int(np.searchsorted(mass, target))
    return np.flatnonzero(bands <= last)


def _floor(value: float, dtype: np.dtype) -> np.ndarray:
    """The largest `dtype` number at most `value` (0-d): `row >= it` holds for every entry >= value."""
    near = np.asarray(max(value, float(np.finfo(dtype).min))).astype(dtype)  # (a row may be float16)
    return np.asarray(np.nextafter(near, np.asarray(-np.inf, dtype))) if float(near) > value else near


def _by_logit(logits: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ascending `ids` reordered by descending logit, ties by id (the full stable sort's order), and their logits."""
    if logits.dtype.itemsize <= 4 and ids.size > 64 and logits.shape[0] < 2**32:
        # one unique 64-bit key per token, logit order then id: a plain (vectorised) sort is then
        # stable, and many times faster than a stable argsort of the values
        bits = (logits[ids].astype(np.float32) + np.float32(0.0)).view(np.uint32)  # -0.0 ties with 0.0
        desc = np.where(bits >> 31, bits, np.uint32(0x7FFFFFFF) - bits)  # grows as the logit falls
        keys = np.sort((desc.astype(np.uint64) << np.uint64(32)) | ids.astype(np.uint64))
        ids = (keys & np.uint64(0xFFFFFFFF)).astype(np.intp)
    else:
        ids = ids[np.argsort(-logits[ids].astype(np.float64), kind="stable")]
    return ids, logits[ids].astype(np.float64)


def _certain_keep(
    vals: np.ndarray, total: float, params: SamplingParams, whole_min_p: bool, n: int, slack: float
) -> int | None:
    """`_keep` of the full sorted row, from its sorted head `vals` and the row's weight `total`
    (within `slack` relatively); None when a cut falls within the slack (rounding could put it
    either side: `slack` for top-p, _SLACK for min-p, whose weights are the head's own) or past the head."""
    weights = np.exp(vals - vals[0])
    beyond = vals.size + 1
    by_p = by_min = beyond
    if params.top_p < 1.0:
        mass = np.cumsum(weights / total)
        if np.any(np.abs(mass - params.top_p) <= slack):
            return None
        by_p = int(np.count_nonzero(mass < params.top_p)) + 1
    if params.min_p > 0.0:
        if np.any(np.abs(weights - params.min_p) <= _SLACK * params.min_p):
            return None
        by_min = int(np.count_nonzero(weights >= params.min_p))
        if by_min == vals.size and not whole_min_p:
            by_min = beyond  # tokens past the head may pass too
    keep = min(by_p, by_min)
    if keep == beyond:
        if vals.size < n:
            return None
        keep = n
    return max(keep, 1)


# The greedy confidence's tail: tokens deeper than _SURE_DEPTH below the top count through
# every _SURE_STRIDE-th of them (on the demo model's rows that tail holds a median 1% of the
# mass, and the estimate is within 0.012 of the exact value; 0.18 against 0.51 ms at 262k).
_SURE_DEPTH = 8.0
_SURE_STRIDE = 16


def confidence(logits: np.ndarray, dist: Dist, params: SamplingParams) -> float:
    """How sure the model is of its best token: the top probability of `dist`, or at
    temperature 0 (where `dist` is one-hot) of the untempered softmax of the row. The second
    is a hint for the draft's stop rule and never part of a distribution, so on long rows it
    is estimated: the head exactly, the thin tail from a stride of it."""
    if not params.greedy:
        return float(dist.probs.max())
    top = float(logits[int(dist.ids[0])])  # the argmax
    if logits.shape[0] < 256 * _SURE_STRIDE or not math.isfinite(top):
        return 1.0 / float(np.exp(logits - float(logits.max())).sum())
    floor = top - _SURE_DEPTH
    head = logits[logits >= floor]
    tail = logits[::_SURE_STRIDE]
    tail = tail[tail < floor]
    total = float(np.exp(head - top).sum(dtype=np.float64))
    return 1.0 / (total + _SURE_STRIDE * float(np.exp(tail - top).sum(dtype=np.float64)))
