"""The acceptance rule: exact cases, then its distribution against the target's own."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from edgespec.core.sampling import Dist
from edgespec.core.verify import _zeros, residual, verify


def dist(probs: dict[int, float]) -> Dist:
    ids = np.array(sorted(probs), dtype=np.int64)
    return Dist(ids, np.array([probs[i] for i in ids]))


class NoDraws(np.random.Generator):
    def __init__(self) -> None:
        super().__init__(np.random.PCG64(0))

    def random(self, *a, **k):
        raise AssertionError("greedy verification must not draw from the RNG")


def test_greedy_accepts_while_draft_matches_argmax_then_emits_argmax() -> None:
    p = [Dist.one_hot(5), Dist.one_hot(6), Dist.one_hot(9), Dist.one_hot(1)]
    q = [Dist.one_hot(5), Dist.one_hot(6), Dist.one_hot(7)]
    assert verify([5, 6, 7], q, p, NoDraws()) == (2, 9)


def test_greedy_all_accepted_emits_bonus_from_last_target_row() -> None:
    p = [Dist.one_hot(3), Dist.one_hot(4), Dist.one_hot(8)]
    q = [Dist.one_hot(3), Dist.one_hot(4)]
    assert verify([3, 4], q, p, NoDraws()) == (2, 8)


def test_token_the_target_gives_zero_mass_is_always_rejected() -> None:
    # +inf/-inf style forcing: p puts nothing on the draft token
    p = [dist({1: 1.0}), dist({2: 1.0})]
    q = [dist({0: 0.9, 1: 0.1})]
    for seed in range(20):
        assert verify([0], q, p, np.random.default_rng(seed)) == (0, 1)


def test_token_with_p_at_least_q_is_always_accepted() -> None:
    p = [dist({0: 0.6, 1: 0.4}), dist({3: 1.0})]
    q = [dist({0: 0.5, 1: 0.5})]
    for seed in range(20):
        assert verify([0], q, p, np.random.default_rng(seed)) == (1, 3)


def test_residual_is_normalised_positive_part_over_union_of_supports() -> None:
    p = dist({0: 0.5, 1: 0.3, 4: 0.2})
    q = dist({0: 0.7, 1: 0.1, 2: 0.2})
    r = residual(p, q)
    assert dict(zip(r.ids.tolist(), np.round(r.probs, 12).tolist())) == {1: 0.5, 4: 0.5}


def test_residual_matches_the_dense_definition_on_random_supports() -> None:
    """Supports that overlap in part, ids in any order (a Dist lists them by logit), q's
    largest id beyond p's and the other way round: the positive part of the dense p - q,
    through one row of zeros reused from call to call."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(2, 60))
        p_ids, q_ids = (rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False) for _ in range(2))
        p = Dist(p_ids.astype(np.int64), rng.dirichlet(np.ones(p_ids.size)))
        q = Dist(q_ids.astype(np.int64), rng.dirichlet(np.ones(q_ids.size)))
        want = np.maximum(p.dense(n) - q.dense(n), 0.0)
        r = residual(p, q)
        assert not _zeros(n).any()  # the reused row is left as it was found
        if want.sum() <= 1e-12:
            assert r is p
            continue
        assert np.unique(r.ids).size == r.ids.size
        np.testing.assert_allclose(r.dense(n), want / want.sum(), rtol=1e-12, atol=1e-15)


def test_a_residual_that_fails_leaves_the_zero_row_clean() -> None:
    """A malformed Dist (more ids than probabilities) raises; the reused row stays zero, so the
    next rejection on this thread is still right."""
    _zeros(16)  # the thread's row, long enough for every call below (a longer one would be new)
    with pytest.raises(ValueError):
        residual(Dist(np.array([0, 1, 2]), np.array([0.5, 0.5])), Dist(np.array([1, 2]), np.array([0.3, 0.7])))
    assert not _zeros(4).any()
    r = residual(dist({1: 0.6, 2: 0.4}), dist({1: 0.6, 3: 0.4}))
    assert r.ids.tolist() == [2] and r.probs.tolist() == [1.0]


def test_zero_draft_tokens_is_plain_sampling_from_p() -> None:
    assert verify([], [], [Dist.one_hot(7)], NoDraws()) == (0, 7)


# -- statistics ---------------------------------------------------------------------------------
V = 6


def _random_dist(rng: np.random.Generator, support: int) -> Dist:
    ids = np.sort(rng.choice(V, size=support, replace=False))
    probs = rng.dirichlet(np.ones(support))
    return Dist(ids.astype(np.int64), probs)


def _broken_verify(draft, q, p, rng):
    """A plausible bug: on rejection resample from p instead of the residual."""
    for i, x in enumerate(draft):
        if rng.random() < min(1.0, p[i].prob(x) / q[i].prob(x)):
            continue
        return i, p[i].sample(rng)
    return len(draft), p[len(draft)].sample(rng)


def _first_token_counts(rule, p: Dist, q: Dist, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.zeros(V)
    bonus = Dist.one_hot(0)
    for _ in range(n):
        x = q.sample(rng)
        a, t = rule([x], [q], [p, bonus], rng)
        counts[x if a == 1 else t] += 1
    return counts


def _pvalue(counts: np.ndarray, p: Dist) -> float:
    expected = p.dense(V) * counts.sum()
    mask = expected > 0
    assert counts[~mask].sum() == 0, "emitted a token the target gives probability 0"
    return float(sps.chisquare(counts[mask], expected[mask]).pvalue)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_first_emitted_token_is_distributed_as_target(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p, q = _random_dist(rng, 4), _random_dist(rng, 5)
    counts = _first_token_counts(verify, p, q, 20000, seed)
    assert _pvalue(counts, p) > 1e-3


def test_negative_control_broken_rule_is_detected() -> None:
    rng = np.random.default_rng(7)
    p = Dist(np.arange(4), np.array([0.5, 0.3, 0.15, 0.05]))
    q = Dist(np.arange(4), np.array([0.05, 0.15, 0.3, 0.5]))
    counts = _first_token_counts(_broken_verify, p, q, 20000, 7)
    assert _pvalue(counts, p) < 1e-6, "the statistical test cannot tell a broken rule apart"
    # and the real rule passes on the very same p, q
    assert _pvalue(_first_token_counts(verify, p, q, 20000, 7), p) > 1e-3
    del rng


def test_two_token_joint_distribution_matches_target() -> None:
    """K=2: the first two emitted tokens' joint law equals sampling p twice."""
    rng = np.random.default_rng(11)
    p1, p2, p3 = (_random_dist(rng, 3) for _ in range(3))
    q1, q2 = _random_dist(rng, 4), _random_dist(rng, 4)
    # the target's second row does not depend on the first token here (a fixed table), so the
    # joint target law is p1 x p2.
    counts = np.zeros((V, V))
    n = 30000
    for _ in range(n):
        x1, x2 = q1.sample(rng), q2.sample(rng)
        a, t = verify([x1, x2], [q1, q2], [p1, p2, p3], rng)
        out = [x1, x2][:a] + [t]
        if len(out) == 1:  # rejected at position 1: the second token comes from a fresh step
            out.append(p2.sample(rng))
        counts[out[0], out[1]] += 1
    expected = np.outer(p1.dense(V), p2.dense(V)) * n
    mask = expected > 0
    assert counts[~mask].sum() == 0
    assert sps.chisquare(counts[mask], expected[mask]).pvalue > 1e-3
