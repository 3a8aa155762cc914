"""The draft samples from its head where the target keeps whole rows (sampling.draft_params):
at top_k 0 a draft whose rows can come as heads proposes from its top tokens (DRAFT_HEAD
with min-p, DRAFT_HEAD_UNCUT without), so no whole draft row is read. Verification is
exact for any q the tokens were drawn from, so the output still follows the target's law:
a chi-square test over the first two tokens, with the head cut far inside the vocabulary,
and a negative control (q misreported as the head before top-p's cut) that must fail."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

import edgespec.core.decoder as decoder_mod
from edgespec.core import sampling
from edgespec.core.controller import FixedK
from edgespec.core.decoder import Decoder
from edgespec.core.sampling import Dist, Head, Heads, SamplingParams, to_dist
from tests.chi2 import pvalue, target_joint
from tests.fakes import FakeModel, decode
from tests.test_early_stop import PROMPT

N_VOCAB, N, HEAD = 16, 4000, 3
SHARP = 1.0  # flat rows: top-p at 0.7 keeps several of the 16 tokens, often more than the head holds
PARAMS = SamplingParams(temperature=1.0, top_k=0, top_p=0.7, min_p=0.0)


class HeadFake(FakeModel):
    """A FakeModel whose backend can hand rows over as their top-k (`set_head`)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.head_k = 0
        self.asked: list[int] = []

    def set_head(self, k: int) -> bool:
        self.head_k = k
        self.asked.append(k)
        return True

    def eval(self, tokens: Sequence[int], pos: int, logits_from: int | None = None) -> np.ndarray | Heads:
        rows = super().eval(tokens, pos, logits_from)
        if not self.head_k or not len(rows):
            return rows
        ids = np.argsort(-rows, axis=1, kind="stable")[:, : self.head_k].astype(np.int32)
        return Heads(ids, np.take_along_axis(rows, ids, axis=1))


def _target_joint() -> np.ndarray:
    return target_joint(FakeModel(N_VOCAB, eos_bias=-50.0, sharp=SHARP), PROMPT, PARAMS, N_VOCAB)


def _sample_pairs(monkeypatch: pytest.MonkeyPatch, seed: int) -> tuple[np.ndarray, list[int]]:
    """Pairs from the decoder with a draft of HEAD-token heads, and the size of every q it drew from."""
    monkeypatch.setattr(sampling, "DRAFT_HEAD_UNCUT", HEAD)  # (PARAMS: top-p alone)
    target = HeadFake(N_VOCAB, eos_bias=-50.0, sharp=SHARP)
    draft = HeadFake(N_VOCAB, noise=1.0, eos_bias=-50.0, sharp=SHARP)
    dec = Decoder(target, draft)
    sizes: list[int] = []
    drawn = decoder_mod.to_dist

    def watched(row, params):
        q = drawn(row, params)
        sizes.append(q.ids.size)
        return q

    monkeypatch.setattr(decoder_mod, "to_dist", watched)
    counts = np.zeros((N_VOCAB, N_VOCAB))
    rng = np.random.default_rng(seed)
    for _ in range(N):
        out = [t for s in decode(dec, PROMPT, PARAMS, FixedK(3), max_tokens=3, rng=rng) for t in s.tokens]
        counts[out[0], out[1]] += 1
    assert (target.asked[-1], draft.asked[-1]) == (0, HEAD), "the draft was not asked for heads, or the target was"
    return counts, sizes


def test_a_draft_sampling_from_its_head_keeps_the_targets_law(monkeypatch: pytest.MonkeyPatch) -> None:
    counts, sizes = _sample_pairs(monkeypatch, seed=5)
    assert max(sizes) <= HEAD and len(sizes) > N, "the draft drew from more than its head: the test proves nothing"
    joint = _target_joint()
    assert np.count_nonzero(joint.sum(axis=1)) > HEAD  # the target emits tokens the draft's head never holds
    assert pvalue(counts, joint) > 1e-3


class Misreported(Dist):
    """Drawn from one q, reported to verify as another: WRONG on purpose."""

    __slots__ = ("_drawn",)

    def __init__(self, drawn: Dist, reported: Dist) -> None:
        super().__init__(reported.ids, reported.probs)
        self._drawn = drawn

    def sample(self, rng: np.random.Generator, at: int = 0) -> int:
        return self._drawn.sample(rng, at)


def test_negative_control_a_head_q_misreported_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    """The draft draws from its head cut by top-p, and verify is told the head before the cut."""
    drawn = decoder_mod.to_dist

    def misreported(row, params):
        q = drawn(row, params)
        if isinstance(row, Head):
            return Misreported(q, drawn(row, replace(params, top_p=1.0)))
        return q

    monkeypatch.setattr(decoder_mod, "to_dist", misreported)
    counts, _ = _sample_pairs(monkeypatch, seed=5)
    assert pvalue(counts, _target_joint()) < 1e-6, "the test cannot tell a misreported q apart"


def test_the_draft_keeps_the_requests_sampling_where_its_rows_come_whole() -> None:
    """Heads off (a CPU backend's default): the draft's rows are whole and its q is the request's."""
    target, draft = HeadFake(N_VOCAB), HeadFake(N_VOCAB, noise=1.0)
    dec = Decoder(target, draft, heads=False)
    list(decode(dec, PROMPT, PARAMS, FixedK(3), max_tokens=4, rng=np.random.default_rng(0)))
    assert (target.asked[-1], draft.asked[-1]) == (0, 0) and dec._draft_params == PARAMS


def test_a_scored_catch_up_scores_with_the_q_the_draft_would_have_drawn_from() -> None:
    """The catch-up's scores (min(1, q(x) / p(x)) of each token the draft missed) use the
    draft's head and its own sampling where it drafts from its head, as a draft of x would."""
    from tests.test_scored_catch_up import PROMPT as SCORED_PROMPT
    from tests.test_scored_catch_up import Scripted

    target, draft = HeadFake(64), HeadFake(64, noise=0.8)
    dec = Decoder(target, draft)
    params = SamplingParams(temperature=0.8, top_k=0, top_p=0.95, min_p=0.05)
    ctrl = Scripted(every=5)
    list(decode(dec, SCORED_PROMPT, params, ctrl, max_tokens=40, rng=np.random.default_rng(3)))  # type: ignore[arg-type]
    scores = [s for o in ctrl.outcomes for s in o.scores]
    assert draft.asked[-1] == sampling.DRAFT_HEAD and len(scores) >= 30
    own = sampling.draft_params(params)
    want = []
    for t in range(len(SCORED_PROMPT), len(SCORED_PROMPT) + len(scores)):
        ctx, x = dec.committed[:t], dec.committed[t]
        row = draft._row(ctx)
        ids = np.argsort(-row, kind="stable")[: sampling.DRAFT_HEAD].astype(np.int32)
        q = to_dist(Head(ids, row[ids]), own).prob(x)
        want.append(min(1.0, q / to_dist(target._row(ctx).copy(), params).prob(x)))
    assert scores == pytest.approx(want, rel=1e-9)
