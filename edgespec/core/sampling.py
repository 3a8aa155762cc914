"""The one sampling transform: a logits row -> the distribution sampling uses.

Target rows (p) and draft rows (q) go through the same function. The target's always
with the request's parameters; the draft's too, except where its rows come as heads and
the target's cannot (top-k off: `draft_params`, its own top 40 or 256 first). Verification is
exact for any q a draft token was drawn from, so either way the output is the target's.
Distributions are sparse (`Dist`: token ids and their probabilities), because
after top-k / top-p / min-p only a few dozen tokens keep any mass, and copying
or normalising a whole 150k-entry row per token is the per-step cost we avoid.
Temperature 0 is greedy: a one-hot distribution on the argmax, so greedy and
sampled decoding share one code path.

Order follows llama.cpp's default chain: logit bias and penalties (which
depend on the history: penalties.py, applied by the decoder before to_dist),
then top-k, top-p, min-p on the untempered logits, then temperature, then
softmax over the survivors.
Pure numpy; the RNG is always injected: a numpy Generator, or a seeded request's
position-keyed draws (coupling.Keyed), which `Dist.sample` asks for the token's position.

The definition sorts the k largest logits (the whole row when top-k is off)
and cuts; at 150k-260k vocabularies that sort is most of a row's cost. So
to_dist first tries paths that sort only a head of the row (found from column
maxima for top-k; for top-p / min-p from a band below the top or the row's
total weight: top_p.py) and return exactly the definition's Dist: the same ids
in the same order, the same probabilities. Where they cannot show that (ties whose order only the full
partition decides, a cut within rounding of top_p or min_p, NaN or inf), the
definition runs. tests/test_sampling_exact.py holds the definition's original
code and compares the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from . import defaults
from .coupling import Keyed
from .penalties import Penalties
from .top_p import at_least, fold, untruncated_head

# ndarray.sum less its Python wrapper (a few us a call on a row of 40 read right after a
# model's eval, at a dozen rows a step)
_sum = np.add.reduce
_ONE = np.ones(1)
_ONE.flags.writeable = False
Draws = np.random.Generator | Keyed  # what a decoding run draws its tokens with


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

    Ids are unique; probs sum to 1. Tokens not listed have probability 0. Immutable once
    made: the last token sampled or asked about is remembered with its probability (a draft
    token's q is read twice, for the stop rule and by verify; an accepted token's p twice).
    """

    __slots__ = ("ids", "probs", "_cdf", "_last")

    def __init__(self, ids: np.ndarray, probs: np.ndarray) -> None:
        self.ids = ids
        self.probs = probs
        self._cdf: np.ndarray | None = None
        self._last: tuple[int, float] | None = None

    @classmethod
    def one_hot(cls, token: int) -> Dist:
        return cls(np.array([token], dtype=np.int64), _ONE)  # (one shared read-only [1.0]: np.ones is a Python call)

    def prob(self, token: int) -> float:
        last = self._last
        if last is not None and last[0] == token:
            return last[1]
        hit = (self.ids == token).nonzero()[0]
        p = float(self.probs[hit[0]]) if hit.size else 0.0
        self._last = (token, p)
        return p

    def sample(self, rng: Draws, at: int = 0) -> int:
        """A token drawn from this distribution; `at`: its position in the sequence (the
        only thing a seeded request's draws depend on besides the seed and the token ids)."""
        if self.ids.size == 1:
            j = 0
        elif isinstance(rng, Keyed):
            j = rng.pick(self.ids, self.probs, at)
        else:
            if self._cdf is None:
                self._cdf = self.probs.cumsum()
            u = rng.random() * self._cdf[-1]
            j = min(int(self._cdf.searchsorted(u, side="right")), self.ids.size - 1)
        token = int(self.ids[j])
        self._last = (token, float(self.probs[j]))
        return token

    def dense(self, n_vocab: int) -> np.ndarray:
        out = np.zeros(n_vocab)
        out[self.ids] = self.probs
        return out


class Head:
    """A row's `k` largest logits as the model's backend found them (llama.cpp's backend
    top-k: on a GPU only these leave the device): `vals[j]` is the logit of `ids[j]`, exact,
    in no particular order. Holds all to_dist needs at top_k <= k, or greedy, with nothing
    before top-k (no penalties, bias or grammar: the decoder asks for heads only then). `head[:n]` keeps the ids
    below n (a draft vocabulary a little larger than the target's, as a row is cut); `head[:]` is itself."""

    __slots__ = ("ids", "vals")

    def __init__(self, ids: np.ndarray, vals: np.ndarray) -> None:
        self.ids, self.vals = ids, vals

    def __getitem__(self, cut: slice) -> Head:
        if cut.start is not None or cut.step is not None:
            raise TypeError("a Head only takes [:n] or [:]")
        if cut.stop is None:
            return self
        keep = self.ids < cut.stop
        return self if keep.all() else Head(self.ids[keep], self.vals[keep])


class Heads:
    """The Heads of one eval's rows: `ids[i]`, `vals[i]` (arrays of n rows by k) row i's."""

    __slots__ = ("ids", "vals")

    def __init__(self, ids: np.ndarray, vals: np.ndarray) -> None:
        self.ids, self.vals = ids, vals

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> Head:
        return Head(self.ids[i], self.vals[i])


HEAD_MAX = 256  # the largest top_k served from heads (llama.cpp's backend top-k grows with k)
# greedy rows' heads: the argmax, and the draft's confidence in it (the stop rule's hint) over
# the head, where a confident row's mass is (the tail it leaves out is a few per cent at most)
GREEDY_HEAD = 40


def head_k(params: SamplingParams, n_vocab: int) -> int:
    """The k of the Heads that serve `params` (0: whole rows are needed): sampling that starts
    with top-k, or greedy (no penalties or bias before it; a grammar or logprobs also need
    whole rows)."""
    k = min(GREEDY_HEAD, n_vocab - 1) if params.greedy else params.top_k
    return k if 0 < k <= HEAD_MAX and k < n_vocab and not params.penalties.active else 0


# The draft's own proposals are free to come from any distribution q (verification needs only
# q(x) and q itself): where the request keeps whole rows for the target (top_k off or past
# HEAD_MAX), the draft samples from its top DRAFT_HEAD, when its rows can come as heads.
# With min-p on, 40: its cut leaves nearly no row more tokens. Without it the tail's mass
# counts: on the demo pair at T = 0.8 and top-p 0.95 alone, a draft token's expected
# acceptance is 0.974 with whole rows, 0.961 from the top 40, 0.972 from the top 256.
DRAFT_HEAD = 40
DRAFT_HEAD_UNCUT = HEAD_MAX


def draft_params(params: SamplingParams) -> SamplingParams:
    """What the draft samples with where its rows may come as heads: the request's sampling,
    with top-k first (DRAFT_HEAD, or DRAFT_HEAD_UNCUT without min-p) where the request has no
    top-k a head serves. The target's rows keep the request's sampling; the output is still
    the target's (verify is exact for any q). What the draft leaves out is its row's tail
    past the head, which the draft then never proposes."""
    if params.greedy or 0 < params.top_k <= HEAD_MAX:
        return params
    return replace(params, top_k=DRAFT_HEAD if params.min_p > 0.0 else DRAFT_HEAD_UNCUT)


Rows = np.ndarray | Heads  # what a model's eval returns: whole rows, or their heads (set_head)
Row = np.ndarray | Head


def whole(row: Row) -> np.ndarray:
    """The row itself, for what needs every logit (penalties, a grammar, logprobs)."""
    if isinstance(row, Head):
        raise ValueError("internal: a whole logits row was needed but the model returned its head")
    return row


def head_dist(head: Head, params: SamplingParams) -> Dist:
    """to_dist of the row `head` came from: its tokens by logit, ties by id (the full row's
    order on every row without a tie at the cut), then top-p, min-p and temperature."""
    vals = head.vals.astype(np.float64)
    if params.greedy:
        top = vals.max()
        return Dist.one_hot(int(head.ids[vals == top].min()))
    if params.top_k <= 0 or head.ids.size < params.top_k:
        raise ValueError("internal: a Head serves top_k > 0 and holds at least top_k tokens")
    order = np.lexsort((head.ids, -vals))[: params.top_k]
    ids, vals = head.ids[order], vals[order]
    if _alone(vals, params):
        return Dist.one_hot(int(ids[0]))
    keep = _keep(vals, params)
    scaled = np.exp((vals[:keep] - vals[0]) / params.temperature)
    return Dist(ids[:keep].astype(np.int64), scaled / _sum(scaled))


def _alone(vals: np.ndarray, params: SamplingParams) -> bool:
    """Whether min-p (or top_k 1) keeps just the first of the sorted `vals`: the next lies below
    the min-p cut by far more than rounding could move it (`_keep` would say 1, and the Dist is
    one-hot). A confident row's usual case, decided without the row's exp, sum and cumsum."""
    top = float(vals[0])
    if not (math.isfinite(top) and math.isfinite(params.temperature)):  # (the definition's weights are NaN)
        return False
    if vals.size == 1:
        return True
    # (a min_p under 1e-200 may underflow in the definition's cut, and keep more)
    return params.min_p >= 1e-200 and float(vals[1]) - top < math.log(params.min_p) - 1e-6


def to_dist(logits: np.ndarray | Head, params: SamplingParams) -> Dist:
    """Turn one logits row (any float dtype, length n_vocab; or a Head) into a Dist."""
    if isinstance(logits, Head):
        return head_dist(logits, params)
    if params.greedy:
        return Dist.one_hot(int(np.argmax(logits)))
    n = logits.shape[0]
    k = params.top_k if 0 < params.top_k < n else n
    kept = _top_k_head(logits, k, params) if k < n else untruncated_head(logits, params)
    if kept is None:
        ids, vals = _sorted_top(logits, k)
        keep = _keep(vals, params)
        kept = ids[:keep], vals[:keep]
    ids, vals = kept
    if ids.size == 1 and math.isfinite(vals[0]) and math.isfinite(params.temperature):
        return Dist.one_hot(int(ids[0]))
    scaled = np.exp((vals - vals[0]) / params.temperature)
    return Dist(ids.astype(np.int64), scaled / _sum(scaled))


def prob_of(logits: np.ndarray | Head, token: int, params: SamplingParams) -> float:
    """to_dist(logits, params).prob(token), without listing every token where nothing is cut
    (top_k, top_p and min_p all off: a softmax at the token)."""
    if isinstance(logits, Head):
        return to_dist(logits, params).prob(token)
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
    probs /= _sum(probs)
    keep = vals.size
    if params.top_p < 1.0:
        # smallest prefix whose mass reaches top_p (at least one token)
        keep = min(keep, int(probs.cumsum().searchsorted(params.top_p)) + 1)
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
    f = fold(logits, max(1, min(64, n // (4 * k))))  # >= 4k columns: the k-th largest maximum is a good bar
    if not np.isfinite(f.top):  # NaN or +inf: leave the result to the definition
        return None
    cols = f.col_max.size
    bar = np.partition(f.col_max, cols - k)[cols - k]  # k distinct column maxima reach it
    if bar > -np.inf:
        ids = at_least(f, bar)  # only the columns whose maximum reaches the bar hold such logits
        assert ids is not None
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


# The greedy confidence's tail: tokens deeper than _SURE_DEPTH below the top count through
# every _SURE_STRIDE-th of them (on the demo model's rows that tail holds a median 1% of the
# mass, and the estimate is within 0.012 of the exact value; 0.18 against 0.51 ms at 262k).
_SURE_DEPTH = 8.0
_SURE_STRIDE = 16


def confidence(row: Row, dist: Dist, params: SamplingParams) -> float:
    """How sure the model is of its best token: the top probability of `dist`, or at
    temperature 0 (where `dist` is one-hot) of the untempered softmax of the row. The second
    is a hint for the draft's stop rule and never part of a distribution, so on long rows it
    is estimated: the head exactly, the thin tail from a stride of it; from a Head, over the
    head alone (what its tail would add is not known: the stop rule learns what it means)."""
    if not params.greedy:
        return float(dist.probs.max())
    if isinstance(row, Head):
        vals = row.vals.astype(np.float64)
        return 1.0 / float(_sum(np.exp(vals - vals.max())))
    logits = whole(row)
    top = float(logits[int(dist.ids[0])])  # the argmax
    if logits.shape[0] < 256 * _SURE_STRIDE or not math.isfinite(top):
        return 1.0 / float(np.exp(logits - float(logits.max())).sum())
    floor = top - _SURE_DEPTH
    head = logits[logits >= floor]
    tail = logits[::_SURE_STRIDE]
    tail = tail[tail < floor]
    total = float(np.exp(head - top).sum(dtype=np.float64))
    return 1.0 / (total + _SURE_STRIDE * float(np.exp(tail - top).sum(dtype=np.float64)))
