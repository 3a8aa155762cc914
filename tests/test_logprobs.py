"""Log probabilities on request (Engine.stream(..., logprobs=N)), fake models: one entry per
emitted token, the log-softmax of the target's raw row at that position (before penalties
and temperature), its N best alternatives in order; the same with and without speculation;
nothing when not asked; the engine's checks of penalty and logprob values."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec import EdgespecError
from edgespec.core.logprobs import token_logprob
from tests.fakes import make_engine


def log_softmax(row: np.ndarray) -> np.ndarray:
    x = row.astype(np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


def collect(engine, prompt: str = "t5 t9", **kw):
    tokens, lps, events = [], [], []
    for ev in engine.stream(prompt, max_tokens=40, **kw):
        events.append(ev)
        tokens += ev.tokens
        if ev.logprobs is not None:
            assert len(ev.logprobs) == len(ev.tokens)
            lps += ev.logprobs
    return tokens, lps, events


@pytest.mark.parametrize("options", [{"temperature": 0.8, "seed": 3, "k": 4}, {"temperature": 0.0, "k": 2},
                                     {"temperature": 0.8, "seed": 3, "frequency_penalty": 2.0, "k": 3}])  # fmt: skip
def test_each_token_gets_the_log_softmax_of_the_targets_raw_row(options: dict) -> None:
    engine = make_engine()
    tokens, lps, _ = collect(engine, logprobs=3, **options)
    context = engine.tokenize("t5 t9")
    assert [lp.token for lp in lps] == tokens
    for lp in lps:
        want = log_softmax(engine.target._row(context))
        assert lp.logprob == pytest.approx(want[lp.token], abs=1e-6)
        assert [t for t, _ in lp.top] == list(np.argsort(-want, kind="stable")[:3])
        assert [v for _, v in lp.top] == pytest.approx(np.sort(want)[::-1][:3], abs=1e-6)
        assert (lp.token in dict(lp.top)) == (lp.logprob >= lp.top[-1][1])
        assert all(v <= 0 for _, v in lp.top) and sum(np.exp(v) for _, v in lp.top) <= 1 + 1e-9
        context.append(lp.token)


def test_speculative_and_plain_report_the_same_logprobs_when_greedy() -> None:
    engine = make_engine()
    spec, spec_lps, events = collect(engine, temperature=0, logprobs=2, k=4)
    plain, plain_lps, _ = collect(engine, temperature=0, logprobs=2, speculative=False)
    assert spec == plain and any(ev.stats.n_accepted for ev in events)
    assert [lp.logprob for lp in spec_lps] == pytest.approx([lp.logprob for lp in plain_lps], abs=1e-6)


def test_no_logprobs_unless_asked_and_no_alternatives_at_zero() -> None:
    engine = make_engine()
    _, _, events = collect(engine, temperature=0)
    assert all(ev.logprobs is None for ev in events)
    _, lps, events = collect(engine, temperature=0, logprobs=0)
    assert lps and all(lp.top == () for lp in lps) and events[-1].logprobs is not None


def test_a_stop_string_cuts_the_logprobs_with_the_tokens() -> None:
    engine = make_engine()
    tokens, _, _ = collect(engine, temperature=0)
    stop = engine.piece(tokens[5]).decode().strip()
    cut, lps, events = collect(engine, temperature=0, logprobs=1, stop=stop)
    assert events[-1].finish_reason == "stop" and len(cut) < len(tokens) and len(lps) == len(cut)


def test_token_logprob_handles_masked_rows_and_ties() -> None:
    row = np.array([0.0, -np.inf, 0.0, np.log(2.0)], dtype=np.float32)
    lp = token_logprob(row, 0, 4)
    assert lp.logprob == pytest.approx(np.log(0.25))
    assert [t for t, _ in lp.top] == [3, 0, 2, 1] and lp.top[-1][1] == -np.inf


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"presence_penalty": 2.5}, "presence_penalty must be between -2 and 2"),
        ({"frequency_penalty": -3}, "frequency_penalty must be between -2 and 2"),
        ({"repeat_penalty": -1}, "repeat_penalty must be between"),
        ({"logit_bias": {64: 1.0}}, "token id 64 is not in the vocabulary (0..63)"),
        ({"logit_bias": {5: -150}}, "between -100 and 100"),
        ({"logprobs": 21}, "logprobs must be between 0 and 20"),
        ({"logprobs": -1}, "logprobs must be between 0 and 20"),
    ],
)
def test_bad_penalty_and_logprob_values_are_refused_before_generating(options: dict, says: str) -> None:
    with pytest.raises(EdgespecError) as err:
        make_engine().stream("t5", **options)
    assert says in str(err.value)


def test_the_engine_honours_penalties_and_bias() -> None:
    engine = make_engine()
    plain = engine.generate("t5 t9", temperature=0, max_tokens=60).tokens
    banned = plain[3]
    biased = engine.generate("t5 t9", temperature=0, max_tokens=60, logit_bias={banned: -100}).tokens
    assert banned not in biased
    varied = engine.generate("t5 t9", temperature=0, max_tokens=60, frequency_penalty=2.0).tokens
    assert len(set(varied)) > len(set(plain))


@pytest.mark.parametrize("n", [5, 300, 5000, 152_000])
@pytest.mark.parametrize("kind", ["normal", "ties", "masked", "flat"])
def test_the_top_alternatives_are_the_full_sorts_for_any_row(n: int, kind: str) -> None:
    rng = np.random.default_rng(n)
    row = (rng.standard_normal(n) * 3).astype(np.float32)
    if kind == "ties":
        row = np.round(row).astype(np.float32)  # thousands tie at each value
    elif kind == "masked":
        row[3:][rng.random(n - 3) < 0.999] = -np.inf  # what a grammar leaves (a few tokens)
    elif kind == "flat":
        row[:] = 1.5
    want = log_softmax(row)
    for top in (1, 3, 20):
        lp = token_logprob(row, 0, top)
        best = np.lexsort((np.arange(n), -row.astype(np.float64)))[: min(top, n)]
        assert [t for t, _ in lp.top] == best.tolist()
        assert [v for _, v in lp.top] == pytest.approx(want[best], abs=1e-5)
