"""The adaptive K controller on synthetic traces (no models, no clock)."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.controller import AdaptiveK, FixedK, StepOutcome


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
        k = ctrl.next_k()
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
    assert ctrl.estimated_speedup() == pytest.approx(want, rel=0.15)


def test_fixed_k_is_fixed() -> None:
    assert [FixedK(3).next_k() for _ in range(5)] == [3] * 5
    with pytest.raises(ValueError):
        FixedK(-1)
