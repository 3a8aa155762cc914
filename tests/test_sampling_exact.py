"""to_dist against the definition it must reproduce exactly: the full-sort to_dist it
replaced, kept here verbatim. Same ids in the same order, probabilities within 1e-12,
and so the same tokens drawn with the same RNG, for every row and every setting."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgespec.core import sampling
from edgespec.core import top_p as top_p_module
from edgespec.core.sampling import Dist, SamplingParams, to_dist
from edgespec.frontends.bench.row_timing import ROWS, sample_row


def reference_to_dist(logits: np.ndarray, params: SamplingParams) -> Dist:
    """edgespec's to_dist before the fast paths (it sorted the top-k, or the whole row)."""
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


TOP_K = (0, 1, 40, -1)  # -1: the row's length
TOP_P = (1.0, 0.95, 0.5, 1e-9)
MIN_P = (0.0, 0.05, 0.5)
TEMPERATURES = (0.0, 0.3, 0.8, 1.5)


def assert_same_for_every_setting(row: np.ndarray) -> None:
    for top_k, top_p, min_p, temperature in itertools.product(TOP_K, TOP_P, MIN_P, TEMPERATURES):
        params = SamplingParams(temperature, row.size if top_k < 0 else top_k, top_p, min_p)
        with np.errstate(all="ignore"):  # rows of -inf / NaN warn in both
            want, got = reference_to_dist(row, params), to_dist(row, params)
        assert got.ids.tolist() == want.ids.tolist(), params
        assert np.allclose(got.probs, want.probs, rtol=0.0, atol=1e-12, equal_nan=True), params
        if np.isfinite(want.probs).all():
            a, b = np.random.default_rng(7), np.random.default_rng(7)
            assert [got.sample(a) for _ in range(4)] == [want.sample(b) for _ in range(4)], params


# Values chosen to collide: ties, -0.0 against 0.0, -inf, and logs of powers of two, whose
# probabilities sum exactly to top_p = 0.5 (a cut that rounding could move by one token).
SPECIAL = (0.0, -0.0, 1.0, -1.0, 3.0, -np.inf, -np.log(2.0), -np.log(4.0), -2 * np.log(2.0))


@st.composite
def small_rows(draw: st.DrawFn) -> np.ndarray:
    values = st.one_of(st.sampled_from(SPECIAL), st.floats(-30.0, 30.0, width=32))
    row = np.array(draw(st.lists(values, min_size=1, max_size=48)))
    return row.astype(draw(st.sampled_from([np.float32, np.float64])))


@st.composite
def generated_rows(draw: st.DrawFn) -> np.ndarray:
    """Rows too long to draw value by value: a recipe and a seed."""
    n = draw(st.sampled_from([2, 100, 1000, 5000, 30000]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    recipe = draw(st.sampled_from(["normal", "integers", "quarters", "powers of two", "signed zeros", *ROWS]))
    if recipe in ROWS:
        row = sample_row(n, recipe, rng).astype(np.float64)
    elif recipe == "normal":
        row = rng.normal(size=n) * draw(st.sampled_from([0.1, 1.0, 3.0]))
    elif recipe == "integers":
        row = rng.integers(-3, 3, size=n).astype(np.float64)
    elif recipe == "quarters":
        row = np.round(rng.normal(size=n) * 12.0) / 4.0
    elif recipe == "signed zeros":
        row = rng.choice([0.0, -0.0, -1.0], size=n)
    else:
        row = -np.log(2.0) * rng.integers(0, 5, size=n)
    masked = draw(st.sampled_from([0.0, 0.2, 0.995]))  # the last as a grammar or a logit bias leaves a row
    row[rng.random(n) < masked] = -np.inf
    if draw(st.integers(0, 9)) == 0:
        row[rng.integers(n)] = draw(st.sampled_from([np.nan, np.inf]))
    return row.astype(draw(st.sampled_from([np.float32, np.float64])))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_rows())
def test_short_rows_match_the_full_sort_for_every_setting(row: np.ndarray) -> None:
    assert_same_for_every_setting(row)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generated_rows())
def test_long_rows_match_the_full_sort_for_every_setting(row: np.ndarray) -> None:
    assert_same_for_every_setting(row)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generated_rows())
def test_long_rows_match_the_full_sort_with_every_row_folded(row: np.ndarray) -> None:
    """The one-pass top and band (top_p._top_and_band) folds rows of 65536 tokens and more; here every row."""
    old = top_p_module._FOLD_FROM
    top_p_module._FOLD_FROM = 0  # (not monkeypatch: hypothesis runs many examples in one test call)
    try:
        assert_same_for_every_setting(row)
    finally:
        top_p_module._FOLD_FROM = old


@pytest.mark.parametrize("n", [262144, 151936 + 37, 65536])
@pytest.mark.parametrize("kind", ["peaked", "flat", "nan", "masked"])
def test_the_folded_band_is_every_logit_down_to_the_bar(n: int, kind: str) -> None:
    rng = np.random.default_rng(n)
    row = (rng.normal(size=n) * (0.01 if kind == "flat" else 2.0)).astype(np.float32)
    # the top, and a band token (in the unfolded rest where n % 64)
    row[[3, n - 1]] = (0.1, 0.09) if kind == "flat" else (12.0, 11.5)
    if kind == "nan":
        row[n // 2] = np.nan
    if kind == "masked":
        row[rng.random(n) < 0.99] = -np.inf
    top, band = top_p_module._top_and_band(row, 6.0)
    if kind == "nan":
        assert np.isnan(top)
        return
    assert top == row.max()
    want = np.flatnonzero(row >= top_p_module._floor(float(top) - 6.0, row.dtype))
    assert band.tolist() == want.tolist() and band.size > (n // 2 if kind == "flat" else 1)


@pytest.mark.parametrize("dtype, hair", [(np.float64, 1e-7), (np.float32, 4e-6)])
def test_tokens_a_hair_either_side_of_the_min_p_cut_match(dtype: type, hair: float) -> None:
    row = np.random.default_rng(5).normal(size=5000) - 8.0
    row[:3] = 0.0, np.log(0.05) + hair, np.log(0.05) - hair
    row[3:6] = np.log(0.5) + hair, np.log(0.5) - hair, np.log(0.5) + 2 * hair
    assert_same_for_every_setting(row.astype(dtype))


def test_settings_out_of_range_match_too() -> None:
    rng = np.random.default_rng(8)
    for row in (rng.normal(size=5000) * 3.0, rng.normal(size=5)):
        for top_k, top_p, min_p in itertools.product((0, 3), (-0.5, 0.0, 1.5), (-1.0, 0.0, 1.0, 1.5, 1e-250)):
            params = SamplingParams(0.7, top_k, top_p, min_p)
            for logits in (row.astype(np.float32), row):
                want, got = reference_to_dist(logits, params), to_dist(logits, params)
                assert got.ids.tolist() == want.ids.tolist(), params
                assert np.allclose(got.probs, want.probs, rtol=0.0, atol=1e-12), params


def test_long_rows_of_signed_zeros_keep_id_order() -> None:
    """-0.0 == 0.0: tied, so ordered by id, as the stable sort orders them."""
    row = np.random.default_rng(6).choice([0.0, -0.0, -1.0], size=3000)
    for dtype in (np.float32, np.float64):
        assert_same_for_every_setting(row.astype(dtype))


@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize(
    "params",
    [SamplingParams(top_k=40), SamplingParams(top_k=0), SamplingParams(top_k=0, min_p=0.0)],
    ids=["top_k=40", "top_k=0", "top_k=0 min_p=0"],
)
def test_realistic_rows_take_the_fast_path(kind: str, params: SamplingParams, monkeypatch) -> None:
    """Equality alone would pass if every row fell back to the full sort."""
    row = sample_row(30000, kind, np.random.default_rng(3))
    want = to_dist(row, params)

    def no_full_sort(*args: object) -> None:
        raise AssertionError("fell back to sorting the row")

    monkeypatch.setattr(sampling, "_sorted_top", no_full_sort)
    got = to_dist(row, params)
    assert got.ids.tolist() == want.ids.tolist() == reference_to_dist(row, params).ids.tolist()


def test_realistic_rows_sum_their_weights_in_float32(monkeypatch) -> None:
    """With min-p on, the row's total for top-p comes from float32 weights (numpy's float64 exp
    has no SIMD path on AVX2: several times slower at 150k tokens); float64 only where a cut is
    too close."""
    row = sample_row(30000, "peaked", np.random.default_rng(4)).astype(np.float32)  # top-p cuts first
    params = SamplingParams(top_k=0)
    want = reference_to_dist(row, params)

    def no_float64(*args: object) -> None:
        raise AssertionError("summed the row in float64")

    calls = []
    weights32 = top_p_module._weights32
    monkeypatch.setattr(top_p_module, "_weights32", lambda *a: calls.append(1) or weights32(*a))
    monkeypatch.setattr(top_p_module, "_weights64", no_float64)
    got = to_dist(row, params)
    assert calls
    assert got.ids.tolist() == want.ids.tolist()
    assert np.allclose(got.probs, want.probs, rtol=0.0, atol=1e-12)


@pytest.mark.parametrize("gap, float64", [(3e-8, True), (-3e-8, True), (1e-4, False), (-1e-4, False)])
def test_a_top_p_cut_within_the_float32_bound_is_decided_in_float64(gap: float, float64: bool, monkeypatch) -> None:
    """top_p set 3e-8 from a token's cumulative mass: inside the float32 sum's error bound
    (about 1e-6), outside float64's (1e-9), so the float64 weights decide it, and the cut is
    the definition's; 1e-4 away float32 decides alone."""
    row = (np.random.default_rng(9).normal(size=20000) * 2.0).astype(np.float32)
    vals = np.sort(row.astype(np.float64))[::-1]
    mass = np.cumsum(np.exp(vals - vals[0]))
    mass /= mass[-1]
    params = SamplingParams(top_k=0, top_p=float(mass[30]) + gap, min_p=1e-6)  # min-p keeps all 32
    calls = []
    weights64 = top_p_module._weights64
    monkeypatch.setattr(top_p_module, "_weights64", lambda *a: calls.append(1) or weights64(*a))
    got, want = to_dist(row, params), reference_to_dist(row, params)
    assert got.ids.tolist() == want.ids.tolist()
    assert len(got.ids) == (31 if gap < 0 else 32)
    assert bool(calls) == float64


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("top_p, min_p", [(0.95, 0.05), (0.99, 0.05), (0.9, 0.2), (0.99, 0.02)])
def test_rows_where_min_p_cuts_first_sum_nothing_but_the_band(
    dtype: type, top_p: float, min_p: float, monkeypatch
) -> None:
    """A real row's mass sits within a few nats of the top, so the band's weight alone shows
    that top-p cuts no sooner than min-p: no exp of the whole row, and the definition's cut."""
    rng = np.random.default_rng(11)
    row = rng.normal(size=30000) * 2.0 - 6.0  # a long tail, 6 nats and more below the head
    row[:4] = 8.0, 7.2, 6.1, 4.9  # a head as a real row's: the top near 0.6
    row = row.astype(dtype)

    def no_row_sum(*args: object) -> None:
        raise AssertionError("summed the whole row")

    monkeypatch.setattr(top_p_module, "_weights32", no_row_sum)
    monkeypatch.setattr(top_p_module, "_weights64", no_row_sum)
    params = SamplingParams(0.8, 0, top_p, min_p)
    got, want = to_dist(row, params), reference_to_dist(row, params)
    assert got.ids.tolist() == want.ids.tolist()
    assert np.allclose(got.probs, want.probs, rtol=0.0, atol=1e-12)


@pytest.mark.parametrize("top_p, kept", [(0.7, 4), (0.5, 3)])
def test_a_band_too_light_to_show_the_cut_falls_back_to_the_row_sum(top_p: float, kept: int, monkeypatch) -> None:
    """Four tokens within min-p (weights 1, 0.9, 0.8, 0.7) and a tail 10 nats down holding a fifth
    of the row: the band's weight cannot rule top-p out at 0.7 or 0.5, so the whole row's weight
    decides; at 0.7 min-p cuts first after all (4 tokens), at 0.5 top-p does (3)."""
    rng = np.random.default_rng(12)
    row = np.log(0.85 / 20000) + rng.normal(size=20000) * 0.01
    row[:4] = 0.0, np.log(0.9), np.log(0.8), np.log(0.7)
    row = row.astype(np.float32)
    calls = []
    weights32 = top_p_module._weights32
    monkeypatch.setattr(top_p_module, "_weights32", lambda *a: calls.append(1) or weights32(*a))
    params = SamplingParams(0.8, 0, top_p, 0.05)
    got, want = to_dist(row, params), reference_to_dist(row, params)
    assert calls
    assert got.ids.tolist() == want.ids.tolist()
    assert len(got.ids) == kept


@pytest.mark.parametrize("at", [5, 4999])
def test_a_nan_past_the_column_grid_is_left_to_the_definition(at: int) -> None:
    """5000 tokens at top_k=1: 64 rows of 78 columns and 8 left over; a NaN among those 8 must
    send the row to the definition as one inside the grid does (found by a long hypothesis run)."""
    row = (np.random.default_rng(13).normal(size=5000) * 0.1).astype(np.float32)
    row[at] = np.nan
    assert_same_for_every_setting(row)


def test_rows_of_different_lengths_reuse_one_scratch_array_without_leaking_into_a_dist(monkeypatch) -> None:
    """The whole-row weights live in a per-thread array reused from row to row (a fresh one per
    row is a megabyte of page faults at 152k): a Dist made earlier keeps its values when later
    rows, longer or shorter, overwrite that array, and each still matches the definition."""
    params = SamplingParams(top_k=0, min_p=0.0)  # top-p alone: the float64 weights of the whole row
    monkeypatch.setattr(top_p_module, "_SCRATCH", threading.local())  # none yet on this thread
    rows = [sample_row(n, kind, np.random.default_rng(n)) for n in (30000, 5000, 40000) for kind in ROWS]
    dists = [to_dist(row, params) for row in rows]
    scratch = top_p_module._scratch(1, np.float64).base
    assert scratch is not None and scratch.shape[0] == 40000  # one array, grown to the longest row
    for row, got in zip(rows, dists):
        assert not np.shares_memory(got.probs, scratch) and not np.shares_memory(got.ids, scratch)
        want = reference_to_dist(row, params)
        assert got.ids.tolist() == want.ids.tolist()
        assert np.array_equal(got.probs, want.probs)


@pytest.mark.parametrize("size", [65, 1025, 6000])
def test_a_head_is_ordered_by_logit_then_id_by_either_sort(size: int, monkeypatch) -> None:
    """Heads past _RADIX_FROM are ordered by two radix passes, shorter ones by one sort of
    64-bit keys: both give descending logits, ties (many here, with -0.0 beside 0.0, and
    negative and positive values) in ascending id order."""
    rng = np.random.default_rng(size)
    # a hundred-odd distinct values in clusters a few units in the last place apart: within a
    # cluster the keys' high 16 bits tie and the low pass decides
    base = np.round(rng.normal(size=20000) * 3.0)
    row = (base * (1.0 + rng.integers(0, 4, size=20000) * 2.0**-20)).astype(np.float32)
    row[rng.choice(20000, size=300, replace=False)] = -0.0
    ids = np.sort(rng.choice(20000, size=size, replace=False))
    want = ids[np.lexsort((ids, -row[ids].astype(np.float64)))]
    got, vals = top_p_module._by_logit(row, ids)
    assert got.tolist() == want.tolist() and vals.tolist() == row[want].astype(np.float64).tolist()
    monkeypatch.setattr(top_p_module, "_RADIX_FROM", 10**9)  # the other path
    assert top_p_module._by_logit(row, ids)[0].tolist() == want.tolist()
