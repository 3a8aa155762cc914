"""The adaptive K controller on synthetic traces (no models, no clock)."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.core.controller import WARMUP, AdaptiveK, FixedK, StepOutcome, StepTimes


class Machine:
    """A synthetic machine: per-token acceptance a, draft cost c_d, verify cost v(n), overhead o."""

    def __init__(self, a: float, c_d: float, v1: float, v_slope: float, o: float = 0.0005, seed: int = 0) -> None:
        self.a, self.c_d, self.v1, self.v_slope, self.o = a, c_d, v1, v_slope, o
        self.rng = np.random.default_rng(seed)

    def v(self, n: int) -> float:
        return self.v1 * (1 + self.v_slope * (n - 1))

    def step(self, k: int) -> StepOutcome:
        a = 0
        while a < k and self.rng.random() < self.a:
            a += 1
        d, v = k * self.c_d, self.v(k + 1)
        return StepOutcome(k, a, d, v, d + v + self.o)

    def speed(self, k: int) -> float:
        e = sum(self.a**i for i in range(k + 1))
        return e / (k * self.c_d + self.v(k + 1) + self.o)

    def best(self, k_max: int = 10) -> int:
        return max(range(k_max + 1), key=self.speed)


def drive(ctrl: AdaptiveK, machine: Machine, steps: int) -> list[int]:
    ks = []
    for _ in range(steps):
        k = ctrl.plan().k
        ks.append(k)
        ctrl.observe(machine.step(k))
    return ks


def near_best(machine: Machine, k: int) -> bool:
    return machine.speed(k) >= 0.97 * machine.speed(machine.best())


@pytest.mark.parametrize(
    "a, c_d, slope",
    [(0.95, 0.004, 0.08), (0.8, 0.004, 0.08), (0.6, 0.002, 0.02), (0.9, 0.009, 0.1)],
)
def test_picks_the_analytically_best_k(a: float, c_d: float, slope: float) -> None:
    m = Machine(a, c_d, 0.022, slope)
    ctrl = AdaptiveK()
    drive(ctrl, m, 400)
    assert near_best(m, ctrl.best_k()), (ctrl.best_k(), m.best(), [round(m.speed(k)) for k in range(11)])


def test_falls_back_to_plain_decoding_when_speculation_does_not_pay() -> None:
    m = Machine(0.2, 0.012, 0.022, 0.2)
    assert m.best() == 0
    ctrl = AdaptiveK()
    ks = drive(ctrl, m, 300)
    assert ctrl.best_k() == 0
    assert ks[-100:].count(0) >= 85  # mostly plain, with rare probes


def test_returns_to_speculation_when_acceptance_recovers() -> None:
    ctrl = AdaptiveK()
    drive(ctrl, Machine(0.2, 0.012, 0.022, 0.2, seed=1), 200)
    assert ctrl.best_k() == 0
    good = Machine(0.95, 0.004, 0.022, 0.05, seed=2)
    ks = drive(ctrl, good, 300)
    assert ctrl.best_k() > 0 and near_best(good, ctrl.best_k())
    assert ks[-50:].count(0) < 10


def test_moves_k_down_when_acceptance_drops() -> None:
    ctrl = AdaptiveK()
    drive(ctrl, Machine(0.97, 0.003, 0.022, 0.05, seed=3), 300)
    high = ctrl.best_k()
    drive(ctrl, Machine(0.6, 0.003, 0.022, 0.05, seed=4), 300)
    assert ctrl.best_k() < high


def test_never_gets_stuck_probes_neighbours() -> None:
    ctrl = AdaptiveK()
    ks = drive(ctrl, Machine(0.85, 0.004, 0.022, 0.08), 200)
    assert len(set(ks[-64:])) >= 2  # keeps probing around its choice


def test_estimated_speedup_matches_the_formula() -> None:
    m = Machine(0.9, 0.004, 0.022, 0.05, o=0.0)
    ctrl = AdaptiveK()
    drive(ctrl, m, 500)
    want = m.speed(m.best()) / m.speed(0)
    assert ctrl.plan().est_speedup == pytest.approx(want, rel=0.15)


def test_fixed_k_is_fixed() -> None:
    assert [FixedK(3).plan().k for _ in range(5)] == [3] * 5
    with pytest.raises(ValueError):
        FixedK(-1)


def test_cost_fit_stays_sane_with_two_neighbouring_k_and_one_slow_moment() -> None:
    # only K = 9 and 10 measured lately, and the K = 10 median caught a slow moment: a free line
    # through them has a negative fixed part and makes K = 1..3 look nearly free
    ctrl = AdaptiveK()
    for _ in range(5):
        ctrl.step_time[0].add(0.026)
        ctrl.step_time[9].add(0.150)
        ctrl.step_time[10].add(0.185)
    ctrl._tried = [50.0] * 10
    ctrl._accepted = [49.0] * 10
    fixed, per_token = ctrl.step_cost()
    assert 0.026 <= fixed <= 0.026 * 1.3 + 1e-9
    assert ctrl.best_k() >= 6


def test_a_stale_unlucky_plain_time_does_not_keep_it_speculating() -> None:
    # acceptance 0.5 with a draft a third of the target's cost: plain decoding wins; one slow
    # plain step during the warm-up must not make it speculate for the rest of the run
    m = Machine(0.5, 0.012, 0.026, 0.144, seed=5)
    ctrl = AdaptiveK()
    ks = []
    for i in range(400):
        k = ctrl.plan().k
        ks.append(k)
        o = m.step(k)
        if i == 1:  # the second warm-up plain step is twice as slow
            o = StepOutcome(o.k, o.n_accepted, o.draft_s, 2 * o.verify_s, 2 * o.step_s)
        ctrl.observe(o)
    assert m.best() == 0
    assert ks[-200:].count(0) >= 180


def test_recovery_probes_back_off_while_plain_keeps_winning() -> None:
    ctrl = AdaptiveK()
    ks = drive(ctrl, Machine(0.1, 0.012, 0.022, 0.2, seed=6), 1000)
    probes = [i for i, k in enumerate(ks) if k > 0 and i >= 7]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps and max(gaps) >= 128  # later probes far apart
    assert ks[-500:].count(0) >= 495


def test_recovery_probe_waits_for_a_cheap_catch_up() -> None:
    ctrl = AdaptiveK()
    m = Machine(0.1, 0.012, 0.022, 0.2, seed=7)
    lag = 0
    asked_with_lag = []
    for i in range(1, 1000):
        k = ctrl.plan(lag).k
        if k:
            asked_with_lag.append(lag)
        # plain steps leave the draft behind; a probe catches it up, and so does the prefill
        # of each new request (one every 100 steps here)
        lag = 0 if k or i % 100 == 0 else lag + 1
        ctrl.observe(m.step(k))
    assert len(asked_with_lag) > 4  # the warm-up's four draft steps, then probes
    assert all(x <= 16 for x in asked_with_lag[4:])  # none paid an expensive catch-up
    # ... but a draft that never catches up cheaply (one long request) is still probed, later
    waited = AdaptiveK()
    ks = []
    for _ in range(1500):
        ks.append(waited.plan(10_000).k)
        waited.observe(m.step(ks[-1]))
    late = [i for i, k in enumerate(ks) if k and i >= len(WARMUP)]
    assert late and late[0] > 1000


def test_a_new_temperature_starts_with_the_machine_costs_already_measured() -> None:
    times = StepTimes()
    m = Machine(0.95, 0.004, 0.022, 0.05, seed=8)
    first = AdaptiveK(times=times)
    drive(first, m, 200)
    second = AdaptiveK(times=times)  # another temperature: same machine, acceptance unknown
    ks = drive(second, m, 10)
    assert 0 not in ks[:3]  # no plain warm-up steps: T(0) is known
    assert near_best(m, second.best_k())
    with pytest.raises(ValueError):
        AdaptiveK(k_max=6, times=times)


def _feed_sure(ctrl: AdaptiveK, accept_by_sure: dict[float, float], steps: int, seed: int = 0) -> None:
    """Steps whose tokens have the given confidences and acceptance rates, on a machine where
    one draft token costs half a plain step."""
    rng = np.random.default_rng(seed)
    levels = list(accept_by_sure)
    for _ in range(steps):
        k = ctrl.plan().k
        sure = tuple(float(rng.choice(levels)) for _ in range(k))
        a = 0
        while a < k and rng.random() < accept_by_sure[sure[a]]:
            a += 1
        t = 0.026 + 0.013 * k
        ctrl.observe(StepOutcome(k, a, 0.013 * k, 0.026, t, sure))


def test_learns_to_stop_drafting_after_unsure_tokens() -> None:
    ctrl = AdaptiveK()
    _feed_sure(ctrl, {0.05: 0.2, 0.95: 0.99}, 300)
    acc = ctrl.sure_acceptance()
    assert acc[0] < 0.4 and acc[-1] > 0.9
    assert 0.1 <= ctrl.stop_threshold(ctrl.best_k()) <= 0.9  # stops after the unsure, not the sure
    stop = ctrl.plan().stop_below
    assert 0.05 < stop <= 0.95  # stops after the unsure, not the sure


def test_never_stops_drafting_when_every_token_is_likely_accepted() -> None:
    ctrl = AdaptiveK()
    _feed_sure(ctrl, {0.05: 0.97, 0.5: 0.98, 0.95: 0.99}, 300)
    assert ctrl.stop_threshold(ctrl.best_k()) == 0.0
    assert ctrl.plan().stop_below == 0.0


def test_fixed_k_never_stops_early() -> None:
    plan = FixedK(4).plan()
    assert plan.k == 4 and plan.stop_below == 0.0 and not plan.want_sure


def test_p_min_is_a_floor_under_the_learned_threshold() -> None:
    ctrl = AdaptiveK(p_min=0.4)
    _feed_sure(ctrl, {0.05: 0.97, 0.5: 0.98, 0.95: 0.99}, 300)
    assert ctrl.stop_threshold(ctrl.best_k()) == 0.0 and ctrl.plan().stop_below == 0.4
    assert FixedK(4, p_min=0.3).plan().stop_below == 0.3


def test_cost_fit_before_any_draft_step_is_the_plain_step() -> None:
    times = StepTimes()
    times.add(0, 0.025)
    assert times.fit() == (0.025, 0.0)


def test_a_small_k_max_is_never_exceeded() -> None:
    for k_max in (1, 2, 4):
        ctrl = AdaptiveK(k_max=k_max)
        ks = drive(ctrl, Machine(0.3, 0.012, 0.022, 0.2, seed=k_max), 300)
        assert max(ks) <= k_max
