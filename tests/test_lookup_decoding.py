"""Prompt lookup through the real decoder and engine (fake models): greedy identity with plain
decoding, draftless and hybrid; a seeded answer is plain decoding's, draftless; the sampled
law of lookup drafts with a negative control."""

from __future__ import annotations

import numpy as np
import pytest

import edgespec.core.decoder as decoder_mod
from edgespec.core.controller import LOOKUP, AdaptiveK, FixedK, Plan
from edgespec.core.coupling import Keyed
from edgespec.core.decoder import Decoder
from edgespec.core.sampling import SamplingParams
from tests.chi2 import pvalue, target_joint
from tests.fakes import FakeModel, decode, make_engine

GREEDY = SamplingParams(temperature=0.0)
# a prompt that repeats itself: what follows "9 13 21" is known from the context
PROMPT = [1, 5, 9, 13, 21, 30, 44, 5, 9, 13, 21, 30, 44, 5, 9, 13]


def tokens(dec: Decoder, ctrl, params=GREEDY, n: int = 60, seed: int = 0) -> tuple[list[int], object]:
    out, last = [], None
    for step in decode(dec, PROMPT, params, ctrl, max_tokens=n, rng=np.random.default_rng(seed)):
        out += step.tokens
        last = step
    return out, last


@pytest.mark.parametrize("k", [1, 4, 8])
def test_draftless_lookup_greedy_equals_plain(k: int) -> None:
    dec = Decoder(FakeModel(sharp=6.0), lookup=True)  # a sharp model repeats its own loops
    plain, _ = tokens(Decoder(FakeModel(sharp=6.0)), FixedK(0))
    spec, last = tokens(dec, FixedK(k, model=False))
    assert spec == plain
    assert last.stats.sources["lookup"]["drafted"] > 0 and "model" not in last.stats.sources


def test_hybrid_adaptive_greedy_equals_plain() -> None:
    plain, _ = tokens(Decoder(FakeModel(sharp=6.0)), FixedK(0), n=150)
    dec = Decoder(FakeModel(sharp=6.0), FakeModel(sharp=6.0, noise=1.0), lookup=True)
    spec, last = tokens(dec, AdaptiveK(), n=150)
    assert spec == plain


def test_lookup_drafts_are_accepted_on_a_loop() -> None:
    dec = Decoder(FakeModel(sharp=6.0), lookup=True)
    _, last = tokens(dec, FixedK(6, model=False), n=120)
    s = last.stats.sources["lookup"]
    assert s["accepted"] > 0.5 * s["drafted"]  # the sharp fake settles into a loop lookup can copy
    assert last.stats.n_generated == 120


def test_engine_without_a_draft_model_speculates_by_lookup_unless_told_not_to() -> None:
    eng = make_engine(draft=False)
    assert eng.can_speculate and not eng.has_draft
    res = eng.generate("t5 t9 t13 t5 t9 t13 t5 t9", temperature=0, max_tokens=40, k=4)
    assert res.stats.speculative and res.stats.n_drafted > 0
    plain = eng.generate("t5 t9 t13 t5 t9 t13 t5 t9", temperature=0, max_tokens=40, speculative=False)
    assert not plain.stats.speculative and plain.stats.n_drafted == 0 and plain.tokens == res.tokens
    zero = eng.generate("t5 t9 t13 t5 t9 t13 t5 t9", temperature=0, max_tokens=40, k=0)  # K = 0 is plain decoding
    assert not zero.stats.speculative and zero.stats.n_drafted == 0 and zero.tokens == res.tokens
    off = make_engine(draft=False, lookup=False)
    assert not off.can_speculate
    assert not off.generate("t5 t9", temperature=0, max_tokens=10).stats.speculative


def test_lookup_tokens_are_their_own_segments() -> None:
    eng = make_engine(draft=False)
    sources = set()
    for event in eng.stream("t5 t9 t13 t5 t9 t13 t5 t9", temperature=0, max_tokens=60, k=4):
        sources |= {s.source for s in event.segments}
        assert "".join(s.text for s in event.segments) == event.text
    assert sources <= {"lookup", "target"} and "target" in sources


# -- a seeded answer is plain decoding's --------------------------------------------------------
SAMPLED = SamplingParams(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0)
LOOPING = [1, 3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 3, 4]  # over 12 tokens a sampled answer loops back often


def _sampled(lookup_k: int, rng) -> tuple[list[int], object]:
    """80 tokens at T = 0.8: plain decoding (lookup_k 0), or draftless lookup drafts of lookup_k."""
    dec = Decoder(FakeModel(12), lookup=lookup_k > 0)
    ctrl = FixedK(lookup_k, model=False) if lookup_k else FixedK(0)
    out, last = [], None
    for step in decode(dec, LOOPING, SAMPLED, ctrl, max_tokens=80, rng=rng):
        out += step.tokens
        last = step
    return out, last


@pytest.mark.parametrize("k", [2, 6])
def test_seeded_draftless_answer_is_plain_decodings_answer(k: int) -> None:
    """With a seed every token is the target's own keyed draw, a looked-up token kept when it
    is that draw (verify, coupling.py): the same answer as plain decoding, at T = 0.8."""
    for seed in range(6):
        plain, _ = _sampled(0, Keyed(seed))
        spec, last = _sampled(k, Keyed(seed))
        assert spec == plain
        lookup = last.stats.sources["lookup"]
        assert 0 < lookup["accepted"] < lookup["drafted"]  # copies kept and copies broken


def test_negative_control_the_unseeded_rule_gives_another_answer() -> None:
    """Accepting x with probability p(x) and drawing a rejection's token from the residual is
    the same law, but from a generator's stream: the identity above no longer holds."""
    differ = sum(_sampled(6, np.random.default_rng(s))[0] != _sampled(0, np.random.default_rng(s))[0] for s in range(6))
    assert differ >= 5


# -- the sampled law -----------------------------------------------------------------------------
N_VOCAB, N = 6, 6000
FULL = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
LOOP = [1, 3, 4, 5, 3, 4, 5, 3, 4]  # lookup proposes 5, 3 after "3 4"


def _target_joint(target: FakeModel) -> np.ndarray:
    return target_joint(target, LOOP, FULL, N_VOCAB)


def _pairs(seed: int) -> np.ndarray:
    counts = np.zeros((N_VOCAB, N_VOCAB))
    dec = Decoder(FakeModel(N_VOCAB, eos_bias=-50.0, sharp=1.0), lookup=True)
    rng = np.random.default_rng(seed)
    ctrl = FixedK(2, model=False)
    for _ in range(N):
        out = [t for s in decode(dec, LOOP, FULL, ctrl, max_tokens=2, rng=rng) for t in s.tokens]
        counts[out[0], out[1]] += 1
    return counts


def test_sampled_lookup_output_follows_the_target() -> None:
    joint = _target_joint(FakeModel(N_VOCAB, eos_bias=-50.0, sharp=1.0))
    assert pvalue(_pairs(seed=11), joint) > 1e-3


def test_negative_control_a_lookup_draft_always_accepted_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    real_verify = decoder_mod.verify

    def accept_lookup(draft, q, p, rng, at=0):
        # WRONG on purpose: a one-hot proposal accepted whatever p says
        if draft and all(d.ids.size == 1 for d in q):
            return len(draft), p[len(draft)].sample(rng)
        return real_verify(draft, q, p, rng, at)

    monkeypatch.setattr(decoder_mod, "verify", accept_lookup)
    joint = _target_joint(FakeModel(N_VOCAB, eos_bias=-50.0, sharp=1.0))
    assert pvalue(_pairs(seed=11), joint) < 1e-6


class _Recording(FixedK):
    """FixedK that keeps every step's outcome."""

    def __init__(self, k: int, model: bool = True) -> None:
        super().__init__(k, model=model)
        self.outcomes: list = []

    def observe(self, outcome) -> None:
        self.outcomes.append(outcome)


def test_steps_that_do_not_verify_a_proposal_score_it_against_what_they_committed() -> None:
    # model-draft steps (FixedK with a draft model) never verify lookup, yet each reports how
    # many of the proposal's leading tokens the step committed: exactly, at temperature 0
    dec = Decoder(FakeModel(sharp=6.0), FakeModel(sharp=6.0, noise=1.0), lookup=True)
    ctrl = _Recording(4)
    tokens(dec, ctrl, n=80)
    scored = [o for o in ctrl.outcomes if o.shadow[0]]
    assert len(scored) > 5 and all(o.source == "model" for o in scored)
    assert any(o.shadow[1] > 0 for o in scored) and any(o.shadow[1] < o.shadow[0] for o in scored)
    assert all(0 <= o.shadow[1] <= o.shadow[0] <= o.n_accepted + 1 for o in scored)
    assert all(o.match >= 2 for o in scored)


def test_lookup_steps_are_not_scored_twice() -> None:
    dec = Decoder(FakeModel(sharp=6.0), lookup=True)
    ctrl = _Recording(4, model=False)
    tokens(dec, ctrl, n=60)
    assert any(o.source == "lookup" for o in ctrl.outcomes)
    assert all(o.shadow == (0, 0) for o in ctrl.outcomes if o.source == "lookup")


class _Clock:
    """Time that passes only while a fake model evaluates: each eval costs fixed + per * n."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class _Timed(FakeModel):
    def __init__(self, clock: _Clock, fixed: float, per: float, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.clock, self.fixed, self.per = clock, fixed, per

    def eval(self, tokens, pos, logits_from=None):  # type: ignore[no-untyped-def]
        self.clock.now += self.fixed + self.per * len(tokens)
        return super().eval(tokens, pos, logits_from)


class _Alternating(_Recording):
    """Model steps of K = 3, and after every third one two lookup steps (the draft sits out)."""

    def plan(self, lag: int = 0, proposal=None):  # type: ignore[no-untyped-def]
        self.lags = [*getattr(self, "lags", []), lag]
        turn = len(self.lags) % 5
        if turn in (3, 4) and proposal is not None and proposal.tokens:
            return Plan(4, source=LOOKUP)
        return Plan(3)


def test_a_lagging_draft_reads_what_it_missed_in_its_first_call_and_the_step_is_timed_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    monkeypatch.setattr(decoder_mod, "time", clock)
    target = _Timed(clock, 0.030, 0.005, sharp=6.0)
    draft = _Timed(clock, 0.010, 0.002, sharp=6.0, noise=1.0)
    dec = Decoder(target, draft, lookup=True)  # type: ignore[arg-type]
    ctrl = _Alternating(3)
    out, last = tokens(dec, ctrl, n=120)
    assert out == tokens(Decoder(FakeModel(sharp=6.0)), FixedK(0), n=120)[0]  # still the target's text
    lagged = [(lag, o) for lag, o in zip(ctrl.lags, ctrl.outcomes) if o.source == "model" and lag > 1]
    assert len(lagged) >= 3
    for lag, o in lagged:
        # one call fed the lag and the last token: the catch-up is what the lag added to it
        assert o.catch_up_n == lag and o.catch_up_s == pytest.approx(0.002 * lag)
        assert o.draft_s == pytest.approx(o.k * 0.012)  # as if the draft had lacked one token
    # no separate catch-up call: every model step's first draft eval reads the lag and one more
    n_calls = len(draft.evals)
    model_steps = [o for o in ctrl.outcomes if o.source == "model"]
    assert n_calls == 1 + sum(o.k for o in model_steps)  # the prefill, then one eval per drafted token
    assert sorted(n for _, n in draft.evals[1:] if n > 2) == sorted(lag + 1 for lag, _ in lagged)
    # the draft's time is all counted once: steps' draft parts plus the catch-ups taken out of them
    draft_clock = sum(0.010 + 0.002 * n for _, n in draft.evals[1:])
    assert last.stats.draft_s == pytest.approx(draft_clock)


class Renamer(FakeModel):
    """A target that answers with its prompt's code, one name replaced everywhere (20 -> 30):
    what a capable model writes when asked to rename a variable."""

    CODE = [5, 6, 20, 7, 8, 9, 10, 20, 11, 12, 13, 20, 14, 15, 16, 17, 20, 18, 19, 21, 22, 20, 23, 24, 25, 20, 26]

    def __init__(self, prompt_len: int) -> None:
        super().__init__()
        self.script = [30 if t == 20 else t for t in self.CODE] + [self.eos_id]
        self.prompt_len = prompt_len

    def _row(self, ctx):  # type: ignore[no-untyped-def]
        i = min(len(ctx) - self.prompt_len, len(self.script) - 1)
        row = np.full(self.n_vocab, -10.0, dtype=np.float32)
        row[self.script[i]] = 10.0
        return row


@pytest.mark.parametrize("replace", [True, False])
def test_a_rename_is_copied_through_once_seen(replace: bool) -> None:
    prompt = [1, *Renamer.CODE, 40, 41]  # the code, then "rename it"
    model = Renamer(len(prompt))
    dec = Decoder(model, lookup=True)
    if not replace:
        dec.index = type(dec.index)(replace=False)  # type: ignore[misc]
    out = []
    for step in decode(dec, prompt, GREEDY, FixedK(16, model=False), max_tokens=60, rng=np.random.default_rng(0)):
        out += step.tokens
    assert out == model.script[:-1]  # lossless either way
    passes = len(model.evals) - 1  # the prompt's prefill aside
    # each of the six occurrences breaks a copy that does not know the rename (a pass ends at
    # it, one more finds the copy again: 15 passes); one that learnt it from the first two
    # carries on through the other four (8)
    assert passes <= 8 if replace else passes >= 12
