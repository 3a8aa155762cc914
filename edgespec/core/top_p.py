"""Top-p / min-p over the whole row (top-k off) without sorting it: exactly the cut the
definition (sampling._sorted_top + sampling._keep over the full sorted row) makes, or None
where that cannot be shown, and sampling.to_dist runs the definition.

One pass gives the top and, with min-p on, the band of tokens a few nats below it
(`_top_and_band`); the band often shows that top-p cuts no sooner than min-p
(`_min_p_first`), so the row is never exponentiated; else one pass
gives every token's weight and their sum (float32 under a proven error bound where min-p
is on, float64 otherwise), and a few more find a depth below the top that holds every token
the cuts may keep; only those are sorted. tests/test_sampling_exact.py compares every path
with the definition.
"""

from __future__ import annotations

import math
import threading
from typing import NamedTuple, Protocol

import numpy as np


class Cuts(Protocol):
    """What this module reads of sampling.SamplingParams."""

    @property
    def top_p(self) -> float: ...

    @property
    def min_p(self) -> float: ...


# How close a running mass may come to top_p (or a token's weight to min_p) before sums over
# the head alone could round to the other side of the full sort's: far above the rounding of
# either (a float64 sum of n terms of at most 1 is off by under n * 1.2e-16).
_SLACK = 1e-9
# A head this short is sorted as it is: narrowing it further costs more than the sort saves.
_SHORT_HEAD = 2048
# Without min-p, the first head tried: in a confident row these few nats hold the top-p mass.
_GUESS_DEPTH = 8.0


def untruncated_head(logits: np.ndarray, params: Cuts) -> tuple[np.ndarray, np.ndarray] | None:
    """Top-p / min-p over the whole row without sorting it: one pass gives every token's weight
    and their sum (the definition's normaliser), a few more find a depth below the top that
    holds every token the cuts may keep; only those are sorted. Min-p alone needs no sum (its
    cut is relative to the top). With min-p on, a band a few nats deep often shows that
    top-p cuts no sooner (`_min_p_first`: no sum at all); else the sum is taken in float32 first
    (`_weights32`: several times faster where numpy's float64 exp has no SIMD path, as on
    AVX2), with its error bound added to the top-p slack; a cut within that bound is decided
    by float64 weights. Top-p alone keeps thousands of tokens, whose cumulative masses lie
    closer together than that bound: there float32 would mostly be paid twice."""
    if params.top_p >= 1.0 and params.min_p <= 0.0:
        return None  # every token is kept, and listing them in order is the full sort
    if not (params.min_p <= 0.0 or 1e-200 <= params.min_p <= 1.0):
        return None  # (a tinier min_p underflows in the definition; a larger one keeps just the top)
    band = None
    if params.min_p > 0.0:
        top, band = _top_and_band(logits, max(_BAND, -math.log(params.min_p)) + 1e-6)
    else:
        top = logits.max()
    if not np.isfinite(top):
        return None
    if params.top_p >= 1.0:
        return _head(logits, top, None, 0.0, params, _SLACK, band)
    if band is not None:  # (min-p is on)
        kept = _min_p_first(logits, band, params)
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


def _min_p_first(logits: np.ndarray, band: np.ndarray, params: Cuts) -> tuple[np.ndarray, np.ndarray] | None:
    """Min-p's kept tokens where top-p provably cuts no sooner, else None. `band`: the ascending
    ids of the tokens within `_BAND` nats of the top and as deep as min-p keeps (`_top_and_band`).
    Top-p keeps at least the tokens whose mass before them is under top_p; that mass over the
    row's total weight is at most the same mass over the weight of any part of the row, so the
    tokens of the band (few, in a real row) show it without the exp of the whole row."""
    if band.size > _SHORT_HEAD:
        return None
    ids, vals = _by_logit(logits, band)
    weights = np.exp(vals - vals[0])
    if np.any(np.abs(weights - params.min_p) <= _SLACK * params.min_p):
        return None
    by_min = int(np.count_nonzero(weights >= params.min_p))
    if float(weights[: by_min - 1].sum()) >= (params.top_p - _SLACK) * float(weights.sum()):
        return None  # top-p may cut first: its cut needs the whole row's weight
    return ids[:by_min], vals[:by_min]


class Folded(NamedTuple):
    """A row read as `group` rows of n // group columns (`body`), what is left past them
    (`rest`), the columns' maxima and the row's maximum (NaN if any logit is)."""

    body: np.ndarray
    rest: np.ndarray
    col_max: np.ndarray
    top: np.generic


def fold(logits: np.ndarray, group: int) -> Folded:
    """One pass over the row: the elementwise maximum of its `group` rows (sampling's top-k
    bar and `_top_and_band` both start from it)."""
    cols = logits.shape[0] // group
    body, rest = logits[: group * cols].reshape(group, cols), logits[group * cols :]
    col_max = body.max(axis=0)
    top = np.maximum(col_max.max(), rest.max()) if rest.size else col_max.max()  # (Python's max drops a NaN)
    return Folded(body, rest, col_max, top)


def at_least(f: Folded, bar: np.generic | np.ndarray, most: int | None = None) -> np.ndarray | None:
    """Ascending ids of the folded row's logits >= bar: only the columns whose maximum reaches
    it are searched (None where more than `most` do)."""
    hot = np.flatnonzero(f.col_max >= bar)
    if most is not None and hot.size > most:
        return None
    at, col = np.nonzero(f.body[:, hot] >= bar)
    ids = at * f.col_max.size + hot[col]  # row-major: ascending
    if f.rest.size:
        ids = np.concatenate((ids, f.body.size + np.flatnonzero(f.rest >= bar)))
    return ids


# `_top_and_band` folds a row this long or longer into _FOLD rows: one pass over the row instead
# of three (max, compare, nonzero); shorter rows fit a cache and gain nothing.
_FOLD = 64
_FOLD_FROM = 65536


def _top_and_band(logits: np.ndarray, depth: float) -> tuple[np.generic, np.ndarray]:
    """The row's largest logit (NaN or inf as they come: the caller checks) and the ascending
    ids of the logits at least `top - depth` (as `np.flatnonzero(logits >= _floor(top - depth))`),
    a long row through `fold` and `at_least`."""
    if logits.shape[0] < max(_FOLD_FROM, _FOLD):
        top = logits.max()
        return top, (np.flatnonzero(logits >= _floor(float(top) - depth, logits.dtype)) if np.isfinite(top) else _NONE)
    f = fold(logits, _FOLD)
    if not np.isfinite(f.top):
        return f.top, _NONE
    bar = _floor(float(f.top) - depth, logits.dtype)
    band = at_least(f, bar, most=f.col_max.size // 8)  # (a flat row: one more pass is cheaper than gathering)
    return f.top, np.flatnonzero(logits >= bar) if band is None else band


_NONE = np.zeros(0, dtype=np.intp)


def _weights64(logits: np.ndarray, top: np.generic) -> np.ndarray:
    """exp(logits - top) in float64, as the definition computes them (vals - vals[0]); one
    array for the whole row, reused from row to row (`_scratch`)."""
    weights = _scratch(logits.shape[0], np.float64)
    np.subtract(logits, float(top), out=weights, dtype=np.float64)
    return np.exp(weights, out=weights)


_SCRATCH = threading.local()


def _scratch(n: int, dtype: type) -> np.ndarray:
    """A whole-row array of this thread's, valid until its next call for the same dtype. A
    fresh one per row costs more than its exp: glibc maps each array of a megabyte or more
    anew and the kernel faults its pages in (top-p alone at 152k: 1.5 ms a row, 0.55 ms with
    the array reused)."""
    key = np.dtype(dtype).char
    buf = getattr(_SCRATCH, key, None)
    if buf is None or buf.shape[0] < n:
        buf = np.empty(n, dtype)
        setattr(_SCRATCH, key, buf)
    return buf[:n]


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
    weights = np.subtract(logits, top, out=_scratch(logits.shape[0], np.float32))
    depth = min(-float(weights.min()), _DEEP32)  # -inf (a masked token) weighs exactly 0
    np.exp(weights, out=weights)
    return weights, (depth + _EXP32_UNITS) * _UNIT32 + logits.shape[0] * 2.0**-140


def _head(
    logits: np.ndarray,
    top: np.generic,
    weights: np.ndarray | None,
    total: float,
    params: Cuts,
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
    params: Cuts,
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


# From this many tokens two radix passes beat one sort of 64-bit keys (numpy has no SIMD sort
# for them on AVX2): 0.09 against 0.18 ms at 5k tokens, 0.79 against 1.85 at 36k; even at 1k.
_RADIX_FROM = 1024


def _by_logit(logits: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ascending `ids` reordered by descending logit, ties by id (the full stable sort's order), and their logits."""
    if logits.dtype.itemsize <= 4 and ids.size > 64 and logits.shape[0] < 2**32:
        bits = (logits[ids].astype(np.float32) + np.float32(0.0)).view(np.uint32)  # -0.0 ties with 0.0
        desc = np.where(bits >> 31, bits, np.uint32(0x7FFFFFFF) - bits)  # grows as the logit falls
        if ids.size > _RADIX_FROM:
            # two stable passes on 16-bit halves of the key (numpy sorts those by radix, in
            # linear time): ties keep the ascending ids' order
            order = np.argsort((desc & np.uint32(0xFFFF)).astype(np.uint16), kind="stable")
            order = order[np.argsort((desc[order] >> np.uint32(16)).astype(np.uint16), kind="stable")]
            ids = ids[order]
        else:
            # one unique 64-bit key per token, logit order then id: a plain (vectorised) sort is
            # then stable, and many times faster than a stable argsort of the values
            keys = np.sort((desc.astype(np.uint64) << np.uint64(32)) | ids.astype(np.uint64))
            ids = (keys & np.uint64(0xFFFFFFFF)).astype(np.intp)
    else:
        ids = ids[np.argsort(-logits[ids].astype(np.float64), kind="stable")]
    return ids, logits[ids].astype(np.float64)


def _certain_keep(vals: np.ndarray, total: float, params: Cuts, whole_min_p: bool, n: int, slack: float) -> int | None:
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
