"""Prompt lookup's cost model: measured verify costs, acceptance per match length, the best k."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.core.acceptance import COPY_MATCH
from edgespec.core.controller import LOOKUP, MODEL, PROBE_EVERY, AdaptiveK, StepOutcome
from edgespec.core.lookup import Proposal
from edgespec.core.lookup_policy import GROWTH, L_MAX, QUIET, STALE, LookupPolicy, VerifyTimes


def cpu_like(n: int) -> float:
    return 0.020 + 0.003 * (n - 1)  # verifying n tokens: a bandwidth-bound target on a CPU


def measured(sizes: tuple[int, ...] = (1, 2, 5)) -> VerifyTimes:
    vt = VerifyTimes()
    for n in sizes:
        for _ in range(3):
            vt.add(n, cpu_like(n))
    return vt


def test_verify_costs_are_the_medians_where_measured_and_a_line_between() -> None:
    vt = measured()
    assert vt.cost(2) == pytest.approx(cpu_like(2))
    assert vt.cost(9) == pytest.approx(cpu_like(9), rel=0.02)  # extrapolated along the line
    assert all(vt.cost(n) <= vt.cost(n + 1) for n in range(1, L_MAX + 1))
    assert VerifyTimes().cost(3) == 0.0  # nothing measured: no guess


def test_a_size_timed_long_ago_is_believed_only_where_the_sizes_timed_since_say_no_less() -> None:
    slow, other = VerifyTimes(stale=8), VerifyTimes()
    for vt in (slow, other):
        for _ in range(3):
            vt.add(1, cpu_like(1))
            vt.add(5, 10 * cpu_like(5))  # a slow minute, while 5-token batches were verified
        for _ in range(9):
            vt.add(1, cpu_like(1))  # then plain steps only
    assert other.cost(5) == pytest.approx(10 * cpu_like(5))  # without `stale` the slow minute stays
    assert slow.cost(5) == pytest.approx(cpu_like(1) * (1 + 4 * GROWTH))  # the prior from the size timed since
    slow.add(5, cpu_like(5))  # timed again: the old timings are gone, the new one counts alone
    assert slow.cost(5) == pytest.approx(cpu_like(5))
    steep = VerifyTimes(stale=8)
    for _ in range(3):
        steep.add(5, cpu_like(5))
    for _ in range(5):
        steep.add(1, cpu_like(1))
        steep.add(2, 1.2 * cpu_like(1))  # the sizes timed since draw a steeper line: the lower timing holds
    assert steep.cost(5) == pytest.approx(cpu_like(5))
    for _ in range(6):
        steep.add(2, 10 * cpu_like(1))  # but never below a smaller batch timed since
    assert steep.cost(5) == pytest.approx(10 * cpu_like(1))


def test_draftless_lookup_comes_back_after_a_slow_minute() -> None:
    # a draftless engine times lookup's batch sizes only when it takes lookup: timings from a
    # slow minute kept it plain for good (the bench's draftless column, copying 0% after one)
    ctrl = AdaptiveK(model=False)
    offer = Proposal(tokens=tuple(range(10, 26)), n=4, source=0, seen=1, agree=1)

    def step(slow: float = 1.0) -> str:
        plan = ctrl.plan(0, offer)
        if plan.source == LOOKUP:
            t = slow * cpu_like(plan.k + 1)
            ctrl.observe(StepOutcome(plan.k, plan.k, 0.0, t, t + 0.0005, source=LOOKUP, match=4))
        else:  # the copy would have held: its tokens are what the plain step committed
            ctrl.observe(StepOutcome(0, 0, 0.0, cpu_like(1), cpu_like(1) + 0.0005, match=4, shadow=(1, 1)))
        return plan.source

    sources = [step() for _ in range(40)]
    assert sources[-1] == LOOKUP
    sources = [step(slow=10.0) for _ in range(20)]
    assert sources[-1] != LOOKUP  # lookup's steps cost ten times more for a while: plain wins
    sources = [step() for _ in range(STALE + 8)]
    assert sources[-1] == LOOKUP


def feed(policy: LookupPolicy, match: int, accept: float, steps: int, k: int = 8) -> None:
    for i in range(steps):
        a = int(k * accept) if (i % 10) else k  # mostly a fixed share of the k tokens
        policy.observe(match, k, a, cpu_like(k + 1), cpu_like(k + 1) + 0.0005)


def test_a_reliable_copy_drafts_far_and_an_unreliable_one_not_at_all() -> None:
    good = LookupPolicy(measured())
    feed(good, 4, 1.0, 30)
    k, speed = good.best(4, L_MAX)
    assert k >= 12 and speed > 3 * good.plain_speed()
    bad = LookupPolicy(measured())
    feed(bad, 2, 0.0, 30)
    k, speed = bad.best(2, L_MAX)
    assert speed < bad.plain_speed() * 1.01  # a caller compares this with plain decoding


def test_match_lengths_keep_their_own_records() -> None:
    policy = LookupPolicy(measured())
    feed(policy, 4, 1.0, 30)
    feed(policy, 2, 0.0, 30)
    assert policy.best(4, L_MAX)[1] > 2 * policy.best(2, L_MAX)[1]


def test_a_long_match_starts_from_the_shorter_matches_record_and_then_keeps_its_own() -> None:
    policy = LookupPolicy(measured())
    feed(policy, 4, 1.0, 30)  # matches of 4-7 tokens: copies that hold
    assert policy.alpha(20)[0] == pytest.approx(policy.alpha(5)[0], abs=0.02)  # nothing seen at 16+ yet
    assert policy.alpha(20)[10] > 0.9 and policy.alpha(2)[0] == pytest.approx(0.5)  # short ones: the prior
    feed(policy, 20, 0.0, 30)  # then copies matched on 16+ tokens that break at once
    assert policy.alpha(20)[0] < 0.3 and policy.alpha(5)[0] > 0.9


def test_evidence_fades_so_lookup_is_tried_again() -> None:
    policy = LookupPolicy(measured())
    feed(policy, 3, 0.0, 30)
    before = policy.alpha(3)[0]
    for _ in range(300):
        policy.idle()
    assert policy.alpha(3)[0] > before + 0.2


def test_evidence_fades_the_same_after_its_weight_is_folded_into_the_counts() -> None:
    # a fade scales a row's weight (not each count); a weight that would underflow is folded in
    policy = LookupPolicy(measured())
    feed(policy, 3, 0.0, 30)
    before = policy.evidence(3)
    for _ in range(20000):  # 0.99 ** 20000 is about 1e-87: not folded yet
        policy.idle()
    assert policy.evidence(3) == pytest.approx(before * 0.99**20000, rel=1e-9)
    for _ in range(60000):  # 0.99 ** 80000 would underflow to 0: folded on the way
        policy.idle()
    assert policy.evidence(3) < 1e-300
    assert policy.alpha(3)[0] == pytest.approx(0.5)  # back at the prior
    feed(policy, 3, 1.0, 30)  # evidence counts in full after the fold
    assert policy.evidence(3) > 5 and policy.alpha(3)[0] > 0.8


def test_the_adaptive_controller_takes_lookup_only_when_it_pays() -> None:
    ctrl = AdaptiveK(model=False)
    offer = Proposal(tokens=tuple(range(10, 26)), n=4, source=0, seen=1, agree=1)
    assert ctrl.plan(0, offer).k == 0  # nothing measured yet: a plain step
    ctrl.observe(StepOutcome(k=0, n_accepted=0, draft_s=0.0, verify_s=cpu_like(1), step_s=cpu_like(1) + 0.0005))
    plans = []
    for _ in range(40):
        plan = ctrl.plan(0, offer)
        plans.append(plan)
        k = plan.k
        if plan.source == LOOKUP:
            ctrl.observe(StepOutcome(k, k, 0.0, cpu_like(k + 1), cpu_like(k + 1) + 0.0005, source=LOOKUP, match=4))
        else:
            ctrl.observe(StepOutcome(0, 0, 0.0, cpu_like(1), cpu_like(1) + 0.0005))
    assert plans[-1].source == LOOKUP and plans[-1].k >= 12
    # the copying stops: every proposal rejected; it goes back to plain steps
    for _ in range(40):
        plan = ctrl.plan(0, offer)
        if plan.source == LOOKUP:
            ctrl.observe(
                StepOutcome(plan.k, 0, 0.0, cpu_like(plan.k + 1), cpu_like(plan.k + 1), source=LOOKUP, match=4)
            )
        else:
            ctrl.observe(StepOutcome(0, 0, 0.0, cpu_like(1), cpu_like(1) + 0.0005))
    assert ctrl.plan(0, offer).source != LOOKUP or ctrl.plan(0, offer).k <= 1


def test_shadow_scores_follow_the_acceptance_lookup_would_have_had() -> None:
    # a committed token is drawn from p, so it equals the proposed x with probability p(x):
    # scoring proposals against committed tokens learns alpha without verifying them
    rng = np.random.default_rng(3)
    policy = LookupPolicy(measured())
    for _ in range(400):
        hits = 0
        while hits < 6 and rng.random() < 0.7:  # each next token equals the proposal w.p. 0.7
            hits += 1
        policy.record(3, 6, hits)
    assert policy.alpha(3)[0] == pytest.approx(0.7, abs=0.15)
    assert policy.alpha(3)[2] == pytest.approx(0.7, abs=0.15)


def _hybrid_measured(catch_up_per_token: float) -> AdaptiveK:
    """A hybrid controller past its warm-up: model steps of K=4 all accepted, plain steps timed,
    and lookup seen (by shadow scores) to copy 8 tokens at a time."""
    ctrl = AdaptiveK()
    for i in range(40):
        k = ctrl.plan(0, None).k
        lag = 10 if i % 5 == 0 and k else 0  # now and then the draft first reads ten tokens it missed
        ctrl.observe(
            StepOutcome(
                k, k, 0.004 * k, cpu_like(k + 1), cpu_like(k + 1) + 0.004 * k, match=4, shadow=(8, 8),
                catch_up_s=catch_up_per_token * lag, catch_up_n=lag,
            )
        )  # fmt: skip
    return ctrl


def _copying(ctrl: AdaptiveK, steps: int, offer: Proposal) -> None:
    """A copy run: lookup's proposals are accepted whole, the model's drafts a third of the
    time, so lookup takes the steps from the model (a caught-up one too)."""
    for _ in range(steps):
        plan = ctrl.plan(0, offer)
        k = plan.k
        if plan.source == LOOKUP:
            ctrl.observe(StepOutcome(k, k, 0.0, cpu_like(k + 1), cpu_like(k + 1), source=LOOKUP, match=4))
        else:
            ctrl.observe(StepOutcome(k, k // 3, 0.004 * k, cpu_like(k + 1), cpu_like(k + 1) + 0.004 * k, match=4))


def test_a_copy_seen_only_by_shadow_scores_is_taken_and_the_draft_catch_up_is_charged() -> None:
    offer = Proposal(tokens=tuple(range(10, 26)), n=4, source=0, seen=1, agree=1)
    cheap = _hybrid_measured(0.0005)
    assert cheap.plan(0, offer).source == LOOKUP  # never verified, known from shadow scores
    # with a dear catch-up, a long lag makes the model's step dearer than the lookup proposal's
    # even when lookup's record is modest (and the copy is charged feeding its own tokens later),
    # where lookup has been taking steps from the model: the catch-up would buy few model steps
    for lag, want in ((0, "model"), (60, LOOKUP)):
        ctrl = _hybrid_measured(0.005)
        _copying(ctrl, 20, offer)
        for _ in range(30):
            ctrl.lookup.record(4, 6, 2)  # lookup: 2 of 6 accepted of late
        assert ctrl.plan(lag, offer).source == want, lag
    # where it has not (lookup's proposals never beat the model's drafts), the catch-up is paid
    # once and buys a stretch of model steps: the model drafts
    ctrl = _hybrid_measured(0.005)
    for _ in range(30):
        ctrl.lookup.record(4, 6, 2)
    assert ctrl.plan(60, offer).source == MODEL


def test_after_a_copy_run_a_poor_lookup_does_not_shut_the_model_out() -> None:
    # the draft lags far behind after a long copy run; then the text stops copying. The model's
    # speed with that catch-up charged is below plain, but lookup is below plain too: it must not
    # win on that comparison alone (else the lag only grows and the model never comes back)
    offer = Proposal(tokens=tuple(range(10, 26)), n=4, source=0, seen=1, agree=1)
    ctrl = _hybrid_measured(0.005)
    for _ in range(30):
        ctrl.lookup.record(4, 8, 0)  # lookup: nothing accepted of late
    lag, model_steps = 300, 0
    for _ in range(60):
        plan = ctrl.plan(lag, offer)
        if plan.source == LOOKUP:
            ctrl.observe(
                StepOutcome(plan.k, 0, 0.0, cpu_like(plan.k + 1), cpu_like(plan.k + 1), source=LOOKUP, match=4)
            )
            lag += 1
        elif plan.k:
            model_steps += 1
            ctrl.observe(StepOutcome(plan.k, plan.k, 0.004 * plan.k, cpu_like(plan.k + 1), cpu_like(plan.k + 1)))
            lag = 0
        else:
            ctrl.observe(StepOutcome(0, 0, 0.0, cpu_like(1), cpu_like(1), match=4, shadow=(1, 0)))
            lag += 1
    assert model_steps > 20


def test_a_probe_of_a_neighbouring_k_waits_for_a_step_without_a_long_catch_up() -> None:
    # in a copy run (lookup steps) the draft lags far behind; while feeding it does not pay, no
    # model step is planned, not even the probe of a neighbouring K due every PROBE_EVERY steps,
    # on the steps where lookup has nothing to offer
    offer = Proposal(tokens=tuple(range(10, 26)), n=4, source=0, seen=1, agree=1)
    ctrl = _hybrid_measured(0.005)
    _copying(ctrl, 20, offer)  # the copy run so far: lookup takes the steps from the model
    ks = []
    for _ in range(5 * PROBE_EVERY):  # a whole cycle of probes: K + 1, K - 1, K + 1, plain
        _copying(ctrl, 1, offer)
        ks.append(ctrl.plan(200, None).k)  # this step lookup has nothing to offer
    assert ks == [0] * len(ks)
    assert ctrl.plan(0, None).k > 0  # with the draft caught up, the model drafts
    # once lookup has offered nothing for a while (plain steps), the catch-up buys model steps again
    for _ in range(30):
        if ctrl.plan(200, None).k > 0:
            break
        ctrl.observe(StepOutcome(0, 0, 0.0, cpu_like(1), cpu_like(1)))
    else:
        raise AssertionError("the model never came back")


def test_a_short_copy_is_charged_the_catch_up_it_starts_and_each_token_it_adds() -> None:
    # a draft whose lag costs a fixed part beyond its tokens (the demo draft's catch-ups when they
    # were calls of their own: 13 ms for two tokens, 334 ms for 128, a fixed ~8 ms, 2.6 ms a token)
    u = (0.334 - 0.013) / 126
    fixed = 0.013 - 2 * u
    ctrl = _hybrid_measured((fixed + 10 * u) / 10)  # its catch-ups of ten tokens on the same line
    model = (4, 4, 0.016, cpu_like(5), cpu_like(5) + 0.016)
    for _ in range(3):
        ctrl.observe(StepOutcome(*model, catch_up_s=0.013, catch_up_n=2))
    ctrl.observe(StepOutcome(*model, catch_up_s=0.334, catch_up_n=128))
    for _ in range(30):
        ctrl.lookup.record(2, 2, 2)  # two-token copies, always accepted of late
        ctrl.acc.now.observe(4, 2, ())  # the model's drafts: half accepted of late
    offer = Proposal(tokens=(10, 11), n=2, source=0, seen=1, agree=1)
    # uncharged, the copy's step beats the model's: two tokens for a 3-token verify
    assert ctrl.lookup.best(2, 2)[1] > ctrl.speed(ctrl.best_k())
    # the draft is current: the copy would start a catch-up whose fixed part eats its gain
    assert ctrl.times.feed_fixed() == pytest.approx(fixed)
    assert ctrl.plan(0, offer).source == MODEL
    # the draft is behind already: the copy adds its tokens to a catch-up due anyway
    assert ctrl.plan(5, offer).source == LOOKUP


def test_the_steps_no_model_drafted_are_timed_with_what_they_add_to_the_catch_up() -> None:
    policy = LookupPolicy(measured())
    assert policy.draftless_speed() == 0.0  # nothing measured yet
    for _ in range(30):
        policy.observe(4, 8, 7, 0.05, 0.06)  # a lookup step: 8 tokens in 60 ms
        policy.idle(0.03, 0.028, plain=True)  # a plain step: 1 token in 30 ms
    assert policy.draftless_speed() == pytest.approx(9 / 0.09, rel=0.05)
    assert policy.draftless_speed(0.005) == pytest.approx(9 / (0.09 + 9 * 0.005), rel=0.05)
    policy.observe(4, 8, 7, 0.05, 0.06)
    for _ in range(QUIET - 1):
        policy.idle(0.03, 0.028, plain=True)  # a copy broken by a changed word: a plain step or two
    assert policy.draftless_speed() > 2 / 0.03  # still the copy's speed, fading
    policy.idle(0.03, 0.028, plain=True)  # lookup has gone quiet: its past speed is no promise
    assert policy.draftless_speed() == 0.0
    policy.observe(4, 8, 7, 0.05, 0.06)  # a lookup step again: the record counts again
    speed = policy.draftless_speed()
    assert speed > 2 / 0.03
    policy.idle(0.5, 0.0)  # a model step does not count in it
    assert policy.draftless_speed() == speed


def test_a_lagging_draft_is_caught_up_only_when_the_model_beats_the_steps_it_sat_out() -> None:
    # revise at T = 0: the draft lags 20 tokens behind a copy run that lookup drafted whole, and
    # lookup has nothing to offer this step. Feeding the draft beats a plain step, but not what the
    # lookup steps have been giving: a plain step, and lookup takes the next. Once lookup has gone
    # quiet (QUIET steps without a lookup step), the model comes back: with the decayed speed of the
    # copy alone, a fast copy had kept it out for 13 plain steps (revise at T = 0.8 after extract).
    ctrl = _hybrid_measured(0.002)
    for _ in range(10):
        ctrl.observe(StepOutcome(16, 16, 0.0, cpu_like(17), cpu_like(17), source=LOOKUP, match=16))
    lag = 20
    assert ctrl._model_speed(4, lag, ctrl._lookup_share) > ctrl.speed(0)  # the model beats plain
    assert ctrl.lookup.draftless_speed(ctrl.times.feed_slope()) > ctrl._model_speed(4, lag, ctrl._lookup_share)
    assert ctrl.plan(lag, None).k == 0
    assert ctrl.plan(1, None).k > 0  # no catch-up to pay: the model drafts
    for i in range(30):
        ctrl.observe(StepOutcome(0, 0, 0.0, cpu_like(1), cpu_like(1)))
        if ctrl.plan(lag + i, None).k > 0:
            break
    else:
        raise AssertionError("the model never came back")
    assert i == QUIET - 1


def test_no_catch_up_the_rest_of_the_answer_cannot_repay() -> None:
    # rename at T = 0: 59 tokens behind with 6 left, the model came back to feed them all (258 ms)
    # for one step. A lag the model would feed at once with a long answer ahead is not fed when
    # even every token left, drafted and accepted, would save less than the feeding costs.
    ctrl = _hybrid_measured(0.002)
    lag = 30
    feed = ctrl.times.feed_cost(lag)
    assert feed > 0 and ctrl.plan(lag, None).k > 0  # no limit told: the model drafts
    ctrl.begin(max_tokens=int(1.5 * feed / ctrl.times.best_saving()))
    assert ctrl.plan(lag, None).k > 0  # enough answer left to repay it
    ctrl.begin(max_tokens=int(0.7 * feed / ctrl.times.best_saving()))
    assert ctrl.plan(lag, None).k == 0
    assert ctrl.plan(1, None).k > 0  # nothing to feed: the model still drafts


def test_the_models_acceptance_where_lookup_finds_a_copy_is_kept_apart() -> None:
    # beside lookup the model drafts mostly where a copy broke off, its hardest tokens: that
    # record is not what it is judged on where a copy holds, and the other way round
    ctrl = _hybrid_measured(0.0005)
    copy = Proposal(tokens=tuple(range(10, 26)), n=COPY_MATCH, source=0, seen=1, agree=1)
    for _ in range(40):
        ctrl.plan(0, None)  # free text: the model's drafts mostly rejected of late
        ctrl.observe(StepOutcome(4, 0, 0.016, cpu_like(5), cpu_like(5) + 0.016))
    free = ctrl.pooled()
    assert free < 0.3
    ctrl.plan(0, copy)
    assert ctrl.pooled() == pytest.approx(free, abs=0.05)  # no copy drafted yet: judged as elsewhere
    for _ in range(40):
        ctrl.plan(0, copy)  # where a copy holds the model's drafts are all accepted
        ctrl.observe(StepOutcome(4, 4, 0.016, cpu_like(5), cpu_like(5) + 0.016, match=COPY_MATCH))
    assert ctrl.pooled() > 0.9
    assert ctrl.speed(4) > 2 * ctrl.speed(0)
    ctrl.plan(0, Proposal(tokens=(10, 11), n=COPY_MATCH - 1, source=0, seen=1, agree=1))  # a short match
    assert ctrl.pooled() == pytest.approx(free, abs=0.02)
    assert ctrl.speed(4) < ctrl.speed(0)
