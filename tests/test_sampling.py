from __future__ import annotations

import numpy as np
import pytest

from edgespec.core.sampling import Dist, SamplingParams, confidence, to_dist


def test_temperature_zero_is_one_hot_on_argmax() -> None:
    row = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    d = to_dist(row, SamplingParams(temperature=0.0))
    assert d.ids.tolist() == [1] and d.probs.tolist() == [1.0]


def test_top_k_keeps_k_most_likely() -> None:
    row = np.arange(10, dtype=np.float32)
    d = to_dist(row, SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0))
    assert sorted(d.ids.tolist()) == [7, 8, 9]
    assert np.isclose(d.probs.sum(), 1.0)


def test_no_truncation_matches_softmax_with_temperature() -> None:
    rng = np.random.default_rng(0)
    row = rng.normal(size=50).astype(np.float32)
    d = to_dist(row, SamplingParams(temperature=0.7, top_k=0, top_p=1.0, min_p=0.0))
    want = np.exp(row / 0.7 - (row / 0.7).max())
    want /= want.sum()
    assert np.allclose(d.dense(50), want, atol=1e-6)


def test_top_p_keeps_smallest_prefix_reaching_p() -> None:
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    d = to_dist(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.75, min_p=0.0))
    assert sorted(d.ids.tolist()) == [0, 1]


def test_min_p_drops_tokens_below_fraction_of_max() -> None:
    logits = np.log(np.array([0.6, 0.3, 0.07, 0.03]))
    d = to_dist(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.1))
    assert sorted(d.ids.tolist()) == [0, 1, 2]


def test_sample_follows_probabilities() -> None:
    d = Dist(np.array([3, 8]), np.array([0.25, 0.75]))
    rng = np.random.default_rng(1)
    draws = [d.sample(rng) for _ in range(4000)]
    assert abs(draws.count(8) / 4000 - 0.75) < 0.03


def test_same_function_for_target_and_draft_rows_is_deterministic() -> None:
    row = np.random.default_rng(2).normal(size=100).astype(np.float32)
    a = to_dist(row, SamplingParams())
    b = to_dist(row.copy(), SamplingParams())
    assert a.ids.tolist() == b.ids.tolist() and np.array_equal(a.probs, b.probs)


@pytest.mark.parametrize("kind", ["peaked", "flat", "sure"])
@pytest.mark.parametrize("n", [100, 49152, 262144])
def test_the_greedy_confidence_is_within_a_hair_of_the_softmax_top(kind: str, n: int) -> None:
    """On long rows the tail is counted from a stride of it: a hint for the stop rule, close
    to the exact top probability of the untempered softmax (exact on short rows)."""
    from edgespec.frontends.bench.row_timing import sample_row

    rng = np.random.default_rng(n)
    row = sample_row(n, "peaked" if kind == "sure" else kind, rng)
    if kind == "sure":
        row[int(np.argmax(row))] += 6.0
    greedy = SamplingParams(temperature=0.0)
    got = confidence(row, to_dist(row, greedy), greedy)
    w = np.exp(row.astype(np.float64) - float(row.max()))
    want = 1.0 / w.sum()
    assert abs(got - want) <= (1e-6 if n < 4096 else 0.02 * max(want, 0.05)), (got, want)


@pytest.mark.parametrize("top_k", [40, 0])
def test_top_p_zero_keeps_only_the_likeliest_token(top_k: int) -> None:
    # OpenAI and llama.cpp accept top_p = 0: the smallest set reaching it is the top token alone
    row = np.random.default_rng(3).normal(size=5000).astype(np.float32) * 3
    dist = to_dist(row, SamplingParams(temperature=0.8, top_k=top_k, top_p=0.0, min_p=0.0))
    assert list(dist.ids) == [int(np.argmax(row))]
