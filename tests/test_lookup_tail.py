"""Prompt lookup finishing a model draft (Plan.extend, Decoder._lookup_tail): the output law,
greedy identity, the bookkeeping of both sources, and the controller's choice."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import edgespec.core.decoder as decoder_mod
from edgespec import Engine
from edgespec.core.controller import LOOKUP, MODEL, AdaptiveK, FixedK, Plan, StepOutcome
from edgespec.core.decoder import Decoder, Tail
from edgespec.core.lookup import LookupIndex, Proposal
from edgespec.core.lookup_policy import IDLE_DECAY
from edgespec.core.penalties import Penalties
from edgespec.core.sampling import SamplingParams
from tests.chi2 import pvalue
from tests.fakes import FakeModel, decode
from tests.test_lookup_decoding import FULL, LOOP, N_VOCAB, N, _target_joint

GREEDY = SamplingParams(temperature=0.0)
PROMPT = [1, 5, 9, 13, 21, 30, 44, 5, 9, 13, 21, 30, 44, 5, 9, 13]


class Extending(FixedK):
    """K model draft tokens; after `after` of them, lookup's whole proposal when it has one."""

    def __init__(self, k: int, after: int = 1) -> None:
        super().__init__(k)
        self.after = after
        self.outcomes: list[StepOutcome] = []
        self.asked: list[int] = []

    def plan(self, lag: int = 0, proposal: Proposal | None = None) -> Plan:
        return Plan(self.k, extend=True)

    def extension(self, proposal: Proposal, drafted: int) -> int:
        self.asked.append(drafted)
        return len(proposal.tokens) if drafted >= self.after else 0

    def observe(self, outcome: StepOutcome) -> None:
        self.outcomes.append(outcome)


def run(dec: Decoder, ctrl, params=GREEDY, n: int = 80, seed: int = 0, prompt=PROMPT):
    out, steps = [], []
    for step in decode(dec, prompt, params, ctrl, max_tokens=n, rng=np.random.default_rng(seed)):
        out += step.tokens
        steps.append(step)
        if dec.index is not None:
            assert len(dec.index) == len(dec.committed), "the index covers the committed tokens only"
        if dec.draft is not None:
            assert dec.draft.tokens == dec.committed[: len(dec.draft.tokens)], "the draft holds a prefix"
    return out, steps


def hybrid(noise: float = 1.0) -> Decoder:
    return Decoder(FakeModel(sharp=6.0), FakeModel(sharp=6.0, noise=noise), lookup=True)


@pytest.mark.parametrize("k,after", [(4, 1), (8, 2), (8, 7)])
def test_greedy_output_equals_plain_decoding(k: int, after: int) -> None:
    plain, _ = run(Decoder(FakeModel(sharp=6.0)), FixedK(0), n=150)
    ctrl = Extending(k, after)
    spec, _ = run(hybrid(), ctrl, n=150)
    assert spec == plain
    assert any(o.extended for o in ctrl.outcomes), "lookup never finished a draft: the test tests nothing"


def test_each_source_is_counted_and_shown_apart() -> None:
    ctrl = Extending(6, after=2)
    _, steps = run(hybrid(), ctrl, n=150)
    extended = [o for o in ctrl.outcomes if o.extended]
    assert extended and all(o.source == MODEL and o.k > o.extended for o in extended)
    stats = steps[-1].stats
    own = sum(o.k - o.extended for o in ctrl.outcomes)
    assert stats.sources[MODEL]["drafted"] == own
    assert stats.sources[LOOKUP]["drafted"] == sum(o.extended for o in ctrl.outcomes)
    assert stats.sources[MODEL]["accepted"] + stats.sources[LOOKUP]["accepted"] == stats.n_accepted
    shown = [s for step in steps if step.lookup_from is not None for s in step.sources()]
    assert "lookup" in shown and "draft" in shown  # one step, tokens of both sources


def test_no_extension_under_penalties_or_when_lookup_is_off() -> None:
    pen = SamplingParams(temperature=0.0, penalties=Penalties(presence=1.5))
    ctrl = Extending(6)
    run(hybrid(), ctrl, params=pen)
    assert not ctrl.asked
    ctrl = Extending(6)
    run(Decoder(FakeModel(sharp=6.0), FakeModel(sharp=6.0, noise=1.0)), ctrl)
    assert not ctrl.asked


def test_the_extension_respects_max_tokens() -> None:
    ctrl = Extending(8, after=1)
    out, _ = run(hybrid(), ctrl, n=37)
    assert len(out) <= 37
    assert all(o.k <= 36 for o in ctrl.outcomes)


def test_a_looked_up_copy_stops_at_its_end_of_generation_token(monkeypatch: pytest.MonkeyPatch) -> None:
    context = [1, 7, 8, 9, 2, 7, 8]  # "7 8" was followed by "9", then the end of a generation
    dec = Decoder(FakeModel())
    index = LookupIndex()
    index.sync(context, known_prefix=0)
    drafts, qs = [], []
    assert dec._lookup_tail(Tail(index, 16, Extending(8, after=0)), drafts, qs) == (2, 2)
    assert drafts == [9, 2] and [q.ids.tolist() for q in qs] == [[9], [2]]  # nothing after the end
    # a lookup step stops there too
    verified: list[list[int]] = []
    real = decoder_mod.verify

    def watch(draft, q, p, rng, at=0):
        verified.append(list(draft))
        return real(draft, q, p, rng, at)

    monkeypatch.setattr(decoder_mod, "verify", watch)
    run(Decoder(FakeModel(), lookup=True), FixedK(8, model=False), n=4, prompt=context)
    assert verified[0] == [9, 2]


def test_only_the_models_best_k_plans_let_lookup_finish_them() -> None:
    proposal = Proposal(tokens=(3, 4, 5), n=4, source=10, seen=1, agree=1)
    fresh = AdaptiveK()
    assert not fresh.plan(0, proposal).extend  # warming up: the costs of each K are measured
    ctrl = AdaptiveK()
    _warm(ctrl, False)  # lookup alone does not pay: the model's plans stand
    plans = [ctrl.plan(0, proposal) for _ in range(16)]
    best = ctrl.best_k()
    assert any(p.extend for p in plans) and all(p.k == best for p in plans if p.extend)
    assert not any(p.extend for p in plans if p.k != best)  # probes measure a K as it is
    assert not ctrl.plan(0, None).extend  # lookup off


# -- the sampled law -----------------------------------------------------------------------------
# the same loop and target law as tests/test_lookup_decoding.py's lookup steps


def _pairs(seed: int) -> tuple[np.ndarray, int]:
    """The first two tokens of N generations whose model draft lookup may finish after its
    first token (max_tokens 3: room for one model token and one looked-up token)."""
    counts = np.zeros((N_VOCAB, N_VOCAB))
    target = FakeModel(N_VOCAB, eos_bias=-50.0, sharp=1.0)
    dec = Decoder(target, FakeModel(N_VOCAB, eos_bias=-50.0, sharp=1.0, noise=0.8), lookup=True)
    rng = np.random.default_rng(seed)
    ctrl = Extending(2, after=1)
    for _ in range(N):
        out = [t for s in decode(dec, LOOP, FULL, ctrl, max_tokens=3, rng=rng) for t in s.tokens]
        counts[out[0], out[1]] += 1
    return counts, sum(1 for o in ctrl.outcomes if o.extended)


def test_sampled_output_follows_the_target() -> None:
    counts, extended = _pairs(seed=5)
    assert extended > N // 10, "lookup rarely finished a draft: the test would test little"
    assert pvalue(counts, _target_joint(FakeModel(N_VOCAB, eos_bias=-50.0, sharp=1.0))) > 1e-3


def test_negative_control_looked_up_tokens_verified_against_the_models_q(monkeypatch: pytest.MonkeyPatch) -> None:
    def wrong_tail(self, tail, drafts, qs):
        # WRONG on purpose: the looked-up tokens were not drawn from the model's q, yet verified
        # against it (as if the model had drafted them)
        proposal = tail.lookup.propose(min(tail.cap - len(drafts), 16))
        n = tail.controller.extension(proposal, len(drafts)) if proposal.tokens else 0
        drafts.extend(proposal.tokens[:n])
        qs.extend([qs[-1]] * n)
        return n, proposal.n

    monkeypatch.setattr(decoder_mod.Decoder, "_lookup_tail", wrong_tail)
    counts, _ = _pairs(seed=5)
    assert pvalue(counts, _target_joint(FakeModel(N_VOCAB, eos_bias=-50.0, sharp=1.0))) < 1e-6


# -- the controller ------------------------------------------------------------------------------
def _warm(ctrl: AdaptiveK, lookup_accepts: bool) -> None:
    """Costs of a CPU-like machine (a draft token 40% of a plain step), a model that drafts
    well, and lookup's record after 4-gram copies that held (or never did)."""
    for i in range(200):
        k = (0, 2, 4, 6)[i % 4]
        ctrl.plan(0, None)
        ctrl.observe(StepOutcome(k, k, draft_s=0.004 * k, verify_s=0.01 + 0.002 * k, step_s=0.01 + 0.006 * k))
        ctrl.lookup.record(4, 8, 8 if lookup_accepts else 0)


@pytest.mark.parametrize("holds", [True, False])
def test_lookup_finishes_a_draft_only_where_its_copies_hold(holds: bool) -> None:
    ctrl = AdaptiveK()
    _warm(ctrl, holds)
    proposal = Proposal(tokens=tuple(range(3, 19)), n=4, source=10, seen=1, agree=1)
    taken = ctrl.extension(proposal, drafted=1)
    assert (taken > 0) == holds
    if holds:
        assert taken >= 4  # free tokens that hold: as many as pay


def test_an_extended_step_teaches_each_source_its_own_part() -> None:
    ctrl = AdaptiveK()
    _warm(ctrl, True)
    before = [list(r.samples) for r in ctrl.times.by_k]
    tried = ctrl.lookup.evidence(3)
    # 2 model tokens, then 5 looked-up ones after a 3-gram match; all 2 + 3 accepted
    ctrl.observe(StepOutcome(7, 5, 0.008, 0.03, 0.04, extended=5, extended_match=3))
    assert [list(r.samples) for r in ctrl.times.by_k] == before, "no K's cost: it was no K's step"
    assert ctrl.lookup.evidence(3) > tried


def test_a_step_with_two_scored_proposals_fades_lookup_evidence_once() -> None:
    ctrl = AdaptiveK()
    _warm(ctrl, True)
    ctrl.lookup.record(2, 4, 4)  # evidence after a 2-gram match, which this step does not touch
    tried = ctrl.lookup.evidence(2)
    # the step's own proposal (4-gram) scored by shadow, and lookup's copy (3-gram) verified
    ctrl.observe(StepOutcome(7, 5, 0.008, 0.03, 0.04, match=4, shadow=(6, 3), extended=5, extended_match=3))
    assert ctrl.lookup.evidence(2) == pytest.approx(tried * IDLE_DECAY)


def test_the_engine_reports_lookup_tokens_of_a_model_step(monkeypatch: pytest.MonkeyPatch) -> None:
    eng = Engine(FakeModel(sharp=6.0), FakeModel(sharp=6.0, noise=1.0), name="fake")  # type: ignore[arg-type]
    monkeypatch.setattr("edgespec.api.engine.AdaptiveK", lambda **kw: Extending(6, after=2))
    sources = set()
    for event in eng.stream("t5 t9 t13 t21 t30 t44 t5 t9 t13 t21", temperature=0, max_tokens=120):
        sources |= {s.source for s in event.segments}
        assert "".join(s.text for s in event.segments) == event.text
    assert {"draft", "lookup"} <= sources


@pytest.mark.real
@pytest.mark.parametrize("prompt", ["revise", "extract"])
def test_real_pair_greedy_output_is_plain_decodings_with_lookup_finishing_drafts(
    demo_engine, monkeypatch: pytest.MonkeyPatch, prompt: str
) -> None:
    from edgespec.frontends.bench.copying import PROMPTS as COPY_PROMPTS
    from tests.test_real_models import top_two_gap

    messages = COPY_PROMPTS[prompt]
    plain = demo_engine.generate(messages, temperature=0, max_tokens=96, speculative=False)
    ctrl = Extending(6, after=1)  # lookup finishes every model draft it can
    monkeypatch.setattr("edgespec.api.engine.AdaptiveK", lambda **kw: ctrl)
    monkeypatch.setattr(demo_engine, "_adaptive", OrderedDict())  # no controller kept from earlier tests
    demo_engine.reset()
    spec = demo_engine.generate(messages, temperature=0, max_tokens=96)
    assert any(o.extended for o in ctrl.outcomes) and spec.stats.sources[LOOKUP]["accepted"] > 0
    if spec.tokens != plain.tokens:  # batched and one-token matmuls round differently: only at a near tie
        i = next(j for j, (a, b) in enumerate(zip(spec.tokens, plain.tokens)) if a != b)
        prefix = demo_engine.tokenize(messages) + plain.tokens[:i]
        from tests.conftest import demo_paths

        assert top_two_gap(str(demo_paths()[0]), prefix) < 0.05, f"diverged at token {i}"


@pytest.mark.parametrize(("breaks_every", "taken"), [(2, False), (20, True)])
def test_a_model_held_at_its_reach_is_weighed_by_what_it_could_reach(breaks_every: int, taken: bool) -> None:
    """A cheap draft (a GPU's) whose K is held by how deep it has drafted (K = 9, reach 9): a copy
    that breaks at its first token every other time was taken against the plan's K = 9, and each
    copy ending a draft early kept the model from ever drafting deeper (the demo pair on GPU-like
    costs: K = 7-15 beside lookup, 26-32 alone). Against K = 10, the costs' reach, it is not."""
    ctrl = AdaptiveK()
    for i in range(200):
        k = (0, 2, 4, 6)[i % 4]
        ctrl.plan(0, None)
        ctrl.observe(StepOutcome(k, k, draft_s=0.0005 * k, verify_s=0.01 + 0.0005 * k, step_s=0.01 + 0.001 * k))
        ctrl.lookup.record(4, 16, 0 if i % breaks_every == 0 else 16)
    assert ctrl.best_k() == ctrl.acc.now.reach() == 9  # held by its reach, not by its costs
    proposal = Proposal(tokens=tuple(range(3, 19)), n=4, source=10, seen=1, agree=1)
    assert (ctrl.extension(proposal, drafted=1) > 0) == taken
