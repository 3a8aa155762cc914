"""Penalties and logit bias through the real decoder (fake models): greedy speculative decoding
equals greedy plain decoding under each of them (model drafts, lookup drafts, hybrid), and the
sampled law of speculative decoding with penalties is plain penalised sampling (chi-square),
with negative controls that must fail: target rows that miss the draft tokens in their
history, and penalties on the draft's side only."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.stats as sps

import edgespec.core.decoder as decoder_mod
from edgespec.core.controller import AdaptiveK, FixedK
from edgespec.core.decoder import Decoder
from edgespec.core.penalties import History, Penalties
from edgespec.core.sampling import SamplingParams, to_dist
from tests.fakes import FakeModel, decode

PROMPT = [1, 5, 9, 13]
CASES = {
    "frequency": Penalties(frequency=1.0),
    "presence": Penalties(presence=1.5),
    "repeat": Penalties(repeat=1.5),
    "bias": Penalties(logit_bias=((50, 4.0), (43, -100.0))),
    "all": Penalties(presence=0.5, frequency=0.5, repeat=1.2, repeat_last_n=16, logit_bias=((50, 3.0),)),
}


def greedy(pen: Penalties) -> SamplingParams:
    return SamplingParams(0.0, penalties=pen)


def run(dec: Decoder, ctrl, params: SamplingParams, n: int = 80, seed: int = 0, prompt=PROMPT):
    out, last = [], None
    for step in decode(dec, prompt, params, ctrl, max_tokens=n, rng=np.random.default_rng(seed)):
        out += step.tokens
        last = step
    return out, last


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_greedy_speculative_equals_greedy_plain_under_penalties(name: str, k: int) -> None:
    params = greedy(CASES[name])
    plain, _ = run(Decoder(FakeModel()), FixedK(0), params)
    assert plain != run(Decoder(FakeModel()), FixedK(0), SamplingParams(0.0))[0], "the penalty changed nothing"
    spec, last = run(Decoder(FakeModel(), FakeModel(noise=1.0)), FixedK(k), params)
    assert spec == plain
    assert 0 < last.stats.n_accepted < last.stats.n_drafted


@pytest.mark.parametrize("name", ["frequency", "presence", "repeat"])
def test_greedy_lookup_and_hybrid_equal_plain_under_penalties(name: str) -> None:
    params = greedy(CASES[name])
    loop = [1, 5, 9, 13, 21, 30, 44, 5, 9, 13, 21, 30, 44, 5, 9, 13]  # lookup finds matches in it
    plain, _ = run(Decoder(FakeModel(sharp=6.0)), FixedK(0), params, n=120, prompt=loop)
    spec, last = run(Decoder(FakeModel(sharp=6.0), lookup=True), FixedK(4, model=False), params, n=120, prompt=loop)
    assert spec == plain and last.stats.sources["lookup"]["drafted"] > 0
    dec = Decoder(FakeModel(sharp=6.0), FakeModel(sharp=6.0, noise=1.0), lookup=True)
    assert run(dec, AdaptiveK(), params, n=120, prompt=loop)[0] == plain


# -- the sampled law ---------------------------------------------------------------------
N_VOCAB, N = 8, 4000
CHI_PROMPT = [1, 5, 7]
PEN = Penalties(presence=1.0, frequency=1.5, repeat=1.5)
SAMPLED = SamplingParams(1.0, top_k=0, top_p=1.0, min_p=0.0, penalties=PEN)


def _target_joint(target: FakeModel) -> np.ndarray:
    """The exact law of the first two tokens of plain penalised sampling from the target."""

    def dist(ctx: list[int]) -> np.ndarray:
        hist = History(PEN, N_VOCAB, CHI_PROMPT)
        hist.extend(ctx[len(CHI_PROMPT) :])
        return to_dist(hist.apply(target._row(ctx).copy()), SAMPLED).dense(N_VOCAB)

    p1 = dist(CHI_PROMPT)
    joint = np.zeros((N_VOCAB, N_VOCAB))
    for t1 in np.flatnonzero(p1):
        joint[t1] = p1[t1] * dist([*CHI_PROMPT, int(t1)])
    return joint


def _pvalue(seed: int) -> float:
    target = FakeModel(N_VOCAB, eos_bias=-50.0)
    dec = Decoder(target, FakeModel(N_VOCAB, noise=1.0, eos_bias=-50.0))
    rng = np.random.default_rng(seed)
    counts = np.zeros((N_VOCAB, N_VOCAB))
    accepted = 0
    for _ in range(N):  # max_tokens 3: the first step drafts 2 tokens, so p_2 follows a draft token
        steps = list(decode(dec, CHI_PROMPT, SAMPLED, FixedK(2), max_tokens=3, rng=rng))
        out = [t for s in steps for t in s.tokens]
        counts[out[0], out[1]] += 1
        accepted += steps[0].stats.n_accepted >= 1
    assert accepted > N // 3, "too few first drafts accepted: the test would prove little"
    expected = _target_joint(target) * N
    if counts[expected == 0].sum():
        return 0.0  # a pair the target never emits
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    return float(sps.chisquare(obs, exp).pvalue)


def test_speculative_sampling_with_penalties_follows_plain_penalised_sampling() -> None:
    assert _pvalue(seed=3) > 1e-3


def test_negative_control_target_rows_without_the_draft_tokens_in_their_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = decoder_mod.TargetRows.__init__

    def forgetful(self, rows, params, hist=None, drafts=()):
        real(self, rows, params, hist, ())  # WRONG on purpose: p_i sees only the committed tokens

    monkeypatch.setattr(decoder_mod.TargetRows, "__init__", forgetful)
    assert _pvalue(seed=3) < 1e-6, "the test cannot tell a wrong history apart"


def test_negative_control_penalties_on_the_draft_side_only(monkeypatch: pytest.MonkeyPatch) -> None:
    real = decoder_mod.TargetRows.__init__

    def plain_target(self, rows, params, hist=None, drafts=()):
        real(self, rows, dataclasses.replace(params, penalties=Penalties()), None, drafts)  # WRONG on purpose

    monkeypatch.setattr(decoder_mod.TargetRows, "__init__", plain_target)
    assert _pvalue(seed=3) < 1e-6, "the test cannot tell a one-sided penalty apart"


def test_a_draft_that_ignores_the_penalties_still_gives_the_targets_law(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a negative control: verify needs each x_i to be a sample of the q_i it is given,
    whatever q_i is, so penalties on the target's side only cost acceptance, never the law.
    The draft side has to match only to accept well; the target side has to be exact."""
    real = decoder_mod.Decoder._draft

    def unpenalised(self, draft, k, params, rng, plan, hist=None, tail=None):
        return real(self, draft, k, dataclasses.replace(params, penalties=Penalties()), rng, plan, None, tail)

    monkeypatch.setattr(decoder_mod.Decoder, "_draft", unpenalised)
    assert _pvalue(seed=3) > 1e-3
