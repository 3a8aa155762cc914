"""A seeded request's draws (coupling.Keyed): each one an exact sample of its row, and a
speculative answer that is plain decoding's own for the seed, token for token, whatever
the draft source, K or controller; the law of the first two tokens with negative controls."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as sps

import edgespec.core.decoder as decoder_mod
from edgespec.core.controller import AdaptiveK, FixedK
from edgespec.core.coupling import Keyed, draws
from edgespec.core.decoder import Decoder
from edgespec.core.sampling import Dist, SamplingParams
from tests.chi2 import pvalue, target_joint
from tests.fakes import FakeModel, decode, make_engine

P = Dist(np.array([3, 8, 11, 40, 41], dtype=np.int64), np.array([0.45, 0.25, 0.15, 0.1, 0.05]))


def _counts(pick, n: int = 20_000) -> np.ndarray:
    counts = np.zeros(P.ids.size)
    for position in range(n):
        counts[pick(position)] += 1
    return counts


def test_a_keyed_draw_is_a_sample_of_its_row_and_a_function_of_seed_position_and_ids() -> None:
    keyed = Keyed(7)
    counts = _counts(lambda i: keyed.pick(P.ids, P.probs, i))
    assert sps.chisquare(counts, P.probs * counts.sum()).pvalue > 1e-3
    again = Keyed(7)
    assert all(again.pick(P.ids, P.probs, i) == keyed.pick(P.ids, P.probs, i) for i in range(200))
    other = Keyed(8)
    assert sum(other.pick(P.ids, P.probs, i) != keyed.pick(P.ids, P.probs, i) for i in range(200)) > 50
    # the noise is a token's own: listing the support in another order picks the same token
    order = np.array([4, 2, 0, 3, 1])
    assert all(
        P.ids[keyed.pick(P.ids, P.probs, i)] == P.ids[order][keyed.pick(P.ids[order], P.probs[order], i)]
        for i in range(200)
    )
    assert isinstance(draws(None), np.random.Generator) and isinstance(draws(3), Keyed)


def test_negative_control_noise_that_is_not_gumbel_fails_the_sample_test() -> None:
    keyed = Keyed(7)
    # argmax of p + uniform noise: plausible, deterministic, and not a sample of p
    counts = _counts(lambda i: int(np.argmax(P.probs + keyed.uniforms(P.ids, i))))
    assert sps.chisquare(counts, P.probs * counts.sum()).pvalue < 1e-6


# -- through the decoder: plain decoding's answer ------------------------------------------------
SAMPLED = SamplingParams(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0)
LOOPING = [1, 3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 3, 4]


def _answer(dec: Decoder, ctrl, rng, n: int = 60) -> tuple[list[int], object]:
    out, last = [], None
    for step in decode(dec, LOOPING, SAMPLED, ctrl, max_tokens=n, rng=rng):
        out += step.tokens
        last = step
    return out, last


def _pair(lookup: bool = False) -> Decoder:
    # a draft close to the target: agrees often, not always
    return Decoder(FakeModel(12), FakeModel(12, noise=0.7), lookup=lookup)


@pytest.mark.parametrize("seed", range(4))
def test_seeded_speculative_answers_are_plain_decodings_answer(seed: int) -> None:
    plain, _ = _answer(Decoder(FakeModel(12)), FixedK(0), Keyed(seed))
    for ctrl, lookup in ((FixedK(1), False), (FixedK(4), False), (FixedK(8), False), (AdaptiveK(), True)):
        spec, last = _answer(_pair(lookup), ctrl, Keyed(seed))
        assert spec == plain
        assert 0 < last.stats.n_accepted < last.stats.n_drafted  # drafts kept and drafts rejected


def test_negative_control_the_rejection_rule_gives_another_answer() -> None:
    """The unseeded rule (accept with min(1, p/q), residual on rejection) is as lossless but
    draws from a generator's stream: its answers part from plain decoding's."""
    differ = 0
    for seed in range(4):
        plain, _ = _answer(Decoder(FakeModel(12)), FixedK(0), np.random.default_rng(seed))
        spec, _ = _answer(_pair(), FixedK(4), np.random.default_rng(seed))
        differ += spec != plain
    assert differ >= 3


# -- the law of the first two tokens -------------------------------------------------------------
N_VOCAB, N = 6, 6000
FULL = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
PROMPT = [1, 3, 4, 5, 3, 4, 5, 3, 4]


def _pairs() -> np.ndarray:
    target = FakeModel(N_VOCAB, eos_bias=-50.0, sharp=1.0)
    dec = Decoder(target, FakeModel(N_VOCAB, eos_bias=-50.0, sharp=1.0, noise=0.8), lookup=True)
    counts = np.zeros((N_VOCAB, N_VOCAB))
    for seed in range(N):  # a seed per answer: each is one sample of the pair
        out = [t for s in decode(dec, PROMPT, FULL, FixedK(2), max_tokens=2, rng=Keyed(seed)) for t in s.tokens]
        counts[out[0], out[1]] += 1
    return counts


def test_seeded_speculative_pairs_follow_the_target() -> None:
    joint = target_joint(FakeModel(N_VOCAB, eos_bias=-50.0, sharp=1.0), PROMPT, FULL, N_VOCAB)
    assert pvalue(_pairs(), joint) > 1e-3


def test_negative_control_keeping_every_draft_token_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    real_verify = decoder_mod.verify

    def keep_drafts(draft, q, p, rng, at=0):  # WRONG on purpose: the draft's draw is kept unchecked
        return len(draft), real_verify([], [], [p[len(draft)]], rng, at + len(draft))[1]

    monkeypatch.setattr(decoder_mod, "verify", keep_drafts)
    joint = target_joint(FakeModel(N_VOCAB, eos_bias=-50.0, sharp=1.0), PROMPT, FULL, N_VOCAB)
    assert pvalue(_pairs(), joint) < 1e-6


def test_the_engine_draws_a_seeded_request_so() -> None:
    engine = make_engine()
    options = {"temperature": 0.8, "max_tokens": 40, "seed": 5}
    plain = engine.generate("t5 t9 t13", speculative=False, **options)
    for k in (None, 2, 6):
        assert engine.generate("t5 t9 t13", k=k, **options).tokens == plain.tokens
