"""Penalties and logprobs on the real demo pair (SmolLM2-135M: F32 target, Q4_1 draft):
greedy speculative decoding equals greedy plain decoding under frequency_penalty and
presence_penalty, and logprobs with 3 alternatives agree with the tokens returned."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgespec.core.penalties import History, make_penalties
from tests.conftest import demo_paths

pytestmark = pytest.mark.real

PROMPT = "Write a short poem about rain, then explain it."


def penalised_gap(engine, tokens: list[int], n_prompt: int, options: dict) -> float:
    """The target's margin between its two best penalised logits after `tokens` (one-token evals)."""
    from edgespec.llama.backend import LlamaModel

    m = LlamaModel(str(demo_paths()[0]), n_ctx=2048)
    try:
        m.eval(tokens[:-1], 0)
        row = np.array(m.eval(tokens[-1:], len(tokens) - 1, logits_from=0)[0])
    finally:
        m.close()
    pen = make_penalties(options.get("presence_penalty", 0.0), options.get("frequency_penalty", 0.0), 1.0, 64,
                         None, engine.target.n_vocab)  # fmt: skip
    hist = History(pen, engine.target.n_vocab, tokens[:n_prompt])
    hist.extend(tokens[n_prompt:])
    top = np.sort(hist.apply(row))[-2:]
    return float(top[1] - top[0])


@pytest.mark.parametrize("options", [{"frequency_penalty": 1.0}, {"presence_penalty": 1.5}])
def test_greedy_speculative_equals_greedy_plain_under_a_penalty(demo_engine, options: dict) -> None:
    plain = demo_engine.generate(PROMPT, temperature=0, max_tokens=96, speculative=False, **options)
    unpenalised = demo_engine.generate(PROMPT, temperature=0, max_tokens=96, speculative=False)
    assert plain.tokens != unpenalised.tokens, "the penalty changed nothing: the test would prove little"
    for k in (None, 4):
        spec = demo_engine.generate(PROMPT, temperature=0, max_tokens=96, k=k, **options)
        assert spec.stats.n_drafted > 0 or k is None
        if spec.tokens == plain.tokens:
            continue
        # batched and one-token matmuls round differently: a divergence is only acceptable
        # where the target's penalised row nearly ties between its top two tokens
        i = next(j for j, (a, b) in enumerate(zip(spec.tokens, plain.tokens)) if a != b)
        prompt = demo_engine.tokenize(PROMPT)
        gap = penalised_gap(demo_engine, prompt + plain.tokens[:i], len(prompt), options)
        assert gap < 0.05, f"k={k}: diverged at token {i} where the penalised top-two gap is {gap:.4f}"


def test_logprobs_with_top_3_agree_with_the_tokens_returned(demo_engine) -> None:
    tokens, lps = [], []
    for ev in demo_engine.stream(PROMPT, temperature=0.8, seed=5, max_tokens=48, k=4, logprobs=3):
        assert ev.logprobs is not None and len(ev.logprobs) == len(ev.tokens)
        tokens += ev.tokens
        lps += ev.logprobs
    assert [lp.token for lp in lps] == tokens and len(tokens) > 10
    for lp in lps:
        values = [v for _, v in lp.top]
        assert len(lp.top) == 3 and values == sorted(values, reverse=True) and values[0] <= 0
        assert sum(math.exp(v) for v in values) <= 1 + 1e-6
        if lp.logprob > values[-1] + 1e-6:
            assert lp.token in dict(lp.top)
        if lp.token in dict(lp.top):
            assert dict(lp.top)[lp.token] == pytest.approx(lp.logprob)
        else:
            assert lp.logprob <= values[-1] + 1e-6
    with demo_engine.stream(PROMPT, temperature=0, max_tokens=1, logprobs=3) as gen:
        first = next(iter(gen))  # greedy picks the argmax of the raw row: the first of its top 3
    assert first.logprobs is not None and first.logprobs[0].top[0][0] == first.tokens[0]
