"""The controller times the K it has not timed that might beat its best (StepTimes.untimed):
a target whose batch sizes cost in tiles is not a line, and a line through two K misses
the cheap one between or past them."""

from __future__ import annotations

import math

import pytest

from edgespec.core.controller import AdaptiveK, StepTimes
from tests.test_controller import Machine, drive


class Tiled(Machine):
    """A verify that costs in tiles of 4 tokens (a matmul's blocking): 5 tokens cost as 8."""

    def v(self, n: int) -> float:
        return self.v1 * (1 + self.v_slope * 4 * math.ceil(n / 4))


def speed_share(m: Machine, ks: list[int]) -> float:
    """Expected tokens per second over the steps `ks`, as a share of the best fixed K's."""
    return sum(m.speed(k) * m.cost(k) for k in ks) / sum(m.cost(k) for k in ks) / m.speed(m.best())


def times_at(costs: dict[int, float], draft: float = 0.004) -> StepTimes:
    times = StepTimes()
    for k, t in costs.items():
        for _ in range(3):
            times.add(k, t, draft * k)
    return times


def test_the_least_an_untimed_k_can_cost_is_the_k_below_and_the_draft_tokens_between() -> None:
    times = times_at({0: 0.020, 3: 0.050, 8: 0.100})
    curve = times.curve()
    assert times.optimistic(6) == pytest.approx(curve[3] + 3 * times.draft_slope())
    assert times.optimistic(6) < curve[6]  # below the line through K = 3 and 8
    assert times.optimistic(10) == pytest.approx(curve[8] + 2 * times.draft_slope())
    assert times.optimistic(3) == 0.0  # timed: its cost is known
    assert times.optimistic(2) == 0.0  # nothing but plain steps below it


def test_the_untimed_k_that_might_be_fastest_is_named() -> None:
    times = times_at({0: 0.020, 3: 0.050, 8: 0.100})
    always = lambda k: k + 1.0  # noqa: E731 (every draft accepted)
    best = always(8) / times.curve()[8]
    k = times.untimed(always, best)
    assert 3 < k <= times.reach() and k != 8
    assert always(k) / times.optimistic(k) > best
    assert times.untimed(always, 1e9) == 0  # nothing could beat that


@pytest.mark.parametrize("seed", range(6))
def test_adaptive_finds_the_cheap_k_past_a_dear_tile(seed: int) -> None:
    # K = 3 (4 tokens) ends a tile and K = 4 starts the next: measured, the rise from 3 to 4
    # says every K past it is dear, though K = 7 and 11 end tiles and beat K = 3 by 11%
    m = Tiled(0.97, 0.004, 0.022, 0.3, seed=seed)
    assert m.best() == 11 and m.speed(7) > 1.1 * m.speed(3)
    ks = drive(AdaptiveK(), m, 400)
    assert speed_share(m, ks[100:]) >= 0.93  # 0.95-0.97 measured; without the rule 0.86 on most seeds


def test_without_timing_the_untimed_k_it_stays_on_the_first_tile(monkeypatch: pytest.MonkeyPatch) -> None:
    # the negative control: neighbours alone, as before, leave most seeds at K = 3
    monkeypatch.setattr(StepTimes, "untimed", lambda self, expected, best, top=None: 0)
    shares = []
    for seed in range(6):
        m = Tiled(0.97, 0.004, 0.022, 0.3, seed=seed)
        shares.append(speed_share(m, drive(AdaptiveK(), m, 400)[100:]))
    assert sorted(shares)[len(shares) // 2] < 0.9
