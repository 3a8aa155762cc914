"""A controller tries K only half as far again as the positions its acceptance record has
tested (Acceptance.reach): positions never drafted take the pooled rate, which a few
drafts all accepted put at 1. On the demo pair a new temperature on a warm engine drafted
K = 25 after two steps of 4 of 4, and kept 5 of them."""

from __future__ import annotations

import pytest

from edgespec.core.acceptance import Acceptance
from edgespec.core.controller import WARMUP_ACCEPTANCE, AdaptiveK, StepOutcome, StepTimes
from tests.test_untimed import times_at

DRAFT = 0.004  # seconds per draft token


def cost(k: int) -> float:
    return 0.020 + 0.006 * k  # a step: the verify's line and the draft's tokens


def warm_engine_times() -> StepTimes:
    """Step costs an earlier temperature measured, up to K = 16 (reach 24)."""
    return times_at({k: cost(k) for k in (0, 2, 4, 8, 12, 16)}, DRAFT)


def accept_all(ctrl: AdaptiveK, steps: int) -> list[int]:
    ks = []
    for _ in range(steps):
        k = ctrl.plan().k
        ks.append(k)
        ctrl.observe(StepOutcome(k, k, DRAFT * k, cost(k) - DRAFT * k, cost(k), bonus=1.0 if k else None))
    return ks


def test_a_new_temperature_steps_out_from_the_positions_it_tested() -> None:
    ctrl = AdaptiveK(times=warm_engine_times())
    assert ctrl.times.reach() >= 24
    accept_all(ctrl, len(WARMUP_ACCEPTANCE))  # 4 of 4 twice, and each bonus token
    assert ctrl.acc.now.depth == 5
    assert ctrl.best_k() == ctrl.acc.now.reach() == 7  # not 24: positions 6.. were never drafted


def test_the_reach_grows_as_far_drafts_are_accepted() -> None:
    ctrl = AdaptiveK(times=warm_engine_times())
    ks = accept_all(ctrl, 12)[len(WARMUP_ACCEPTANCE) :]
    assert ks[:5] == [7, 10, 15, 22, ctrl.k_max]  # half as far again each step whose drafts all held
    assert all(k == ctrl.k_max for k in ks[4:])


def test_without_the_reach_the_new_temperature_jumps(monkeypatch: pytest.MonkeyPatch) -> None:
    # the negative control: the pooled rate of 10 tokens all accepted sends K as far as the costs allow
    monkeypatch.setattr(Acceptance, "reach", lambda self: 32)
    ctrl = AdaptiveK(times=warm_engine_times())
    accept_all(ctrl, len(WARMUP_ACCEPTANCE))
    assert ctrl.best_k() > 20


def test_a_base_record_lends_its_depth() -> None:
    free = Acceptance(32)
    copy = Acceptance(32, base=free)
    free.observe(8, 8, ())
    assert free.reach() == copy.reach() == 12
    assert Acceptance(32).reach() == 1  # nothing drafted: one position at a time
