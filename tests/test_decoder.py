"""The speculative loop against a fake backend (tests/fakes.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from edgespec.core.controller import FixedK
from edgespec.core.decoder import Decoder
from edgespec.core.errors import ContextFullError
from edgespec.core.events import Stats
from edgespec.core.sampling import SamplingParams
from tests.fakes import FakeModel, decode, make_engine

GREEDY = SamplingParams(temperature=0.0)
PROMPT = [1, 5, 9, 13]


def run(dec: Decoder, k: int, n: int = 40, params: SamplingParams = GREEDY, prompt=PROMPT, seed=0, **kw):
    toks, flags, last = [], [], None
    for step in decode(dec, prompt, params, FixedK(k), max_tokens=n, rng=np.random.default_rng(seed), **kw):
        toks += step.tokens
        flags += step.from_draft
        last = step
    return toks, flags, last


def check_invariant(dec: Decoder) -> None:
    """Both caches hold a prefix of committed[:-1]; llama.cpp's view equals ours."""
    keep = dec.committed[:-1]
    for cache in (dec.target, dec.draft):
        if cache is None:
            continue
        assert cache.model.kv == cache.tokens
        assert cache.tokens == keep[: len(cache.tokens)]
    assert dec.target.tokens == keep


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_greedy_speculative_equals_greedy_plain(k: int) -> None:
    plain, _, _ = run(Decoder(FakeModel()), 0)
    spec, flags, last = run(Decoder(FakeModel(), FakeModel(noise=1.0)), k)
    assert spec == plain
    assert last.stats.n_drafted > 0 and 0 < last.stats.n_accepted < last.stats.n_drafted
    # every accepted draft token is emitted as one, except those the max_tokens cut dropped
    # from the last step (fewer than k)
    assert last.stats.n_accepted - k < sum(flags) <= last.stats.n_accepted


def test_draft_equal_to_target_accepts_every_draft_token() -> None:
    dec = Decoder(FakeModel(), FakeModel())
    toks, flags, last = run(dec, 4, n=41)
    s = last.stats
    assert s.n_accepted == s.n_drafted and s.steps == 9  # 4 accepted + 1 bonus per step
    assert toks == run(Decoder(FakeModel()), 0, n=41)[0]
    check_invariant(dec)


def test_all_accepted_feeds_last_draft_token_and_bonus_together() -> None:
    draft = FakeModel()
    dec = Decoder(FakeModel(), draft)
    run(dec, 3, n=12)
    # after prefill, each step starts the draft with a 2-token batch [x_K, bonus] (except the first)
    batch_sizes = [n for _, n in draft.evals[1:]]
    assert batch_sizes.count(2) == 2


def test_eos_inside_an_accepted_run_ends_there() -> None:
    target = FakeModel(eos_bias=4.0)
    dec = Decoder(target, FakeModel(eos_bias=4.0))
    toks, _, last = run(dec, 8, n=200)
    plain, _, plain_last = run(Decoder(FakeModel(eos_bias=4.0)), 0, n=200)
    assert last.finish_reason == plain_last.finish_reason == "stop"
    assert toks == plain and 2 not in toks
    assert dec.committed[-1] == 2  # EOS is committed, tokens after it are dropped
    check_invariant(dec)


def test_max_tokens_is_exact_even_mid_step() -> None:
    toks, _, last = run(Decoder(FakeModel(), FakeModel()), 8, n=7)
    assert len(toks) == 7 and last.finish_reason == "length" and last.stats.n_generated == 7


def test_context_limit_stops_with_length_and_never_overflows() -> None:
    dec = Decoder(FakeModel(n_ctx=30), FakeModel(n_ctx=30))
    toks, _, last = run(dec, 8, n=1000)
    assert last.finish_reason == "length"
    assert len(PROMPT) + len(toks) <= 30


def test_prompt_longer_than_context_is_refused_with_a_clear_message() -> None:
    dec = Decoder(FakeModel(n_ctx=8))
    with pytest.raises(ContextFullError, match="context holds 8"):
        run(dec, 0, prompt=list(range(1, 10)))


def test_cancel_between_steps_restores_both_caches() -> None:
    dec = Decoder(FakeModel(), FakeModel(noise=1.0))
    cancel = threading.Event()
    gen = decode(dec, PROMPT, GREEDY, FixedK(4), max_tokens=100, rng=np.random.default_rng(0), cancel=cancel)
    next(gen)
    next(gen)
    cancel.set()
    last = next(gen)
    assert last.finish_reason == "cancelled"
    gen.close()
    check_invariant(dec)


def test_consumer_closing_mid_generation_restores_caches() -> None:
    dec = Decoder(FakeModel(), FakeModel(noise=1.0))
    gen = decode(dec, PROMPT, GREEDY, FixedK(4), max_tokens=100, rng=np.random.default_rng(0))
    next(gen)
    gen.close()
    check_invariant(dec)


def test_failure_inside_a_step_restores_caches_and_next_run_matches() -> None:
    target = FakeModel()
    dec = Decoder(target, FakeModel(noise=1.0))
    target.fail_at_eval = 3
    with pytest.raises(RuntimeError):
        run(dec, 4)
    check_invariant(dec)
    target.fail_at_eval = None
    assert run(dec, 4)[0] == run(Decoder(FakeModel()), 0)[0]


def test_prefix_reuse_prefills_only_what_is_new_and_matches_a_fresh_run() -> None:
    target = FakeModel()
    dec = Decoder(target, FakeModel(noise=1.0))
    first, _, _ = run(dec, 4, n=10)
    follow = PROMPT + first + [7, 11]
    toks, _, last = run(dec, 4, n=20, prompt=follow)
    assert last.stats.n_prefilled <= 4  # the new turn (+ the last generated token), not the history
    fresh, _, _ = run(Decoder(FakeModel(), FakeModel(noise=1.0)), 4, n=20, prompt=follow)
    assert toks == fresh


def test_sampled_speculative_is_reproducible_with_a_seed() -> None:
    params = SamplingParams(temperature=0.8, seed=3)
    a = run(Decoder(FakeModel(), FakeModel(noise=1.0)), 4, params=params, seed=3)[0]
    b = run(Decoder(FakeModel(), FakeModel(noise=1.0)), 4, params=params, seed=3)[0]
    assert a == b


def test_engine_stream_text_and_stop_string() -> None:
    eng = make_engine(noise=1.0)
    res = eng.generate("t5 t9", temperature=0.0, max_tokens=30, k=3)
    words = res.text.split()
    assert len(res.tokens) == 30 and len(words) == 30
    stop_word = words[10]
    cut = eng.generate("t5 t9", temperature=0.0, max_tokens=30, k=3, stop=[" " + stop_word + " "])
    assert cut.finish_reason == "stop"
    assert cut.text == res.text[: res.text.index(" " + stop_word + " ")]
    assert stop_word not in cut.text.split()[-1:]


def test_engine_events_flag_draft_tokens() -> None:
    eng = make_engine(noise=0.0)
    events = list(eng.stream("t5 t9", temperature=0.0, max_tokens=20, k=4))
    flags = [f for e in events for f in e.from_draft]
    assert flags.count(True) == events[-1].stats.n_accepted
    assert events[-1].finish_reason == "length" and events[-1].stats.n_generated == 20


def _counts_agree(stats: Stats, flags: list[bool]) -> None:
    assert flags.count(True) == stats.n_accepted <= stats.n_generated == len(flags)
    assert sum(s["accepted"] for s in stats.sources.values()) == stats.n_accepted
    assert sum(stats.accepted_per_position) == stats.n_accepted


def test_accepted_drafts_are_counted_where_the_answer_is() -> None:
    # drafts verified past a stop string or an end-of-generation token are not in the answer:
    # drafted, not accepted (a server's draft_n_accepted read 22 for a 20-token answer)
    eng = make_engine(noise=0.0)  # the draft is the target: every draft is accepted
    whole = eng.generate("t5 t9", temperature=0.0, max_tokens=30, k=8)
    stop = " " + whole.text.split()[13] + " "
    events = list(eng.stream("t5 t9", temperature=0.0, max_tokens=30, k=8, stop=[stop]))
    last = events[-1]
    assert last.finish_reason == "stop" and last.stats.n_generated < 14 + 8
    assert last.stats.n_drafted > last.stats.n_accepted  # the last step's tail was verified, then cut
    _counts_agree(last.stats, [f for e in events for f in e.from_draft])
    eos = make_engine(noise=0.0, eos_bias=4.0)  # the end comes inside a draft, all of it accepted
    events = list(eos.stream("t5 t9", temperature=0.0, max_tokens=60, k=8))
    assert events[-1].finish_reason == "stop" and events[-1].stats.n_generated < 60
    _counts_agree(events[-1].stats, [f for e in events for f in e.from_draft])


def test_draft_with_a_larger_vocabulary_never_proposes_ids_the_target_lacks() -> None:
    target = FakeModel(64)
    draft = FakeModel(70, seed=5)
    dec = Decoder(target, draft)
    params = SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0)
    toks, _, last = run(dec, 4, n=60, params=params)
    assert all(t < 64 for t in toks) and last.stats.n_drafted > 0


class StrictModel(FakeModel):
    """Refuses an id past its vocabulary, as llama.cpp's decode does."""

    def eval(self, tokens, pos, logits_from=None):  # type: ignore[no-untyped-def]
        assert all(0 <= t < self.n_vocab for t in tokens), f"fed an id the model lacks: {list(tokens)}"
        return super().eval(tokens, pos, logits_from)


@pytest.mark.parametrize("k", [1, 4])
def test_draft_with_a_smaller_vocabulary_is_never_fed_ids_it_lacks(k: int) -> None:
    """The target's ids past the draft's (in the prompt and in the output) reach the draft as
    0; a bonus token past them scores 0; greedy output is still plain decoding's."""
    params = SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0)
    dec = Decoder(FakeModel(64), StrictModel(56, seed=5))
    toks, _, last = run(dec, k, n=80, params=params, prompt=[1, 60, 5, 61])
    assert any(t >= 56 for t in toks) and last.stats.n_drafted > 0
    assert dec.draft is not None and any(t >= 56 for t in dec.draft.tokens)  # kept as committed
    row = np.zeros(56, dtype=np.float32)
    assert dec._score(row, 60, 0.5, params) == 0.0 and dec._score(row, 7, 0.5, params) == pytest.approx(1 / 28)
    plain, _, _ = run(Decoder(FakeModel(64)), 0, prompt=[1, 60, 5, 61])
    spec, _, _ = run(Decoder(FakeModel(64), StrictModel(56, seed=5)), k, prompt=[1, 60, 5, 61])
    assert spec == plain


def test_each_event_carries_its_own_stats_snapshot() -> None:
    eng = make_engine(noise=0.5)
    events = list(eng.stream("t5 t9", temperature=0.0, max_tokens=20, k=3))
    assert events[0].stats.n_generated < events[-1].stats.n_generated


def test_engine_refuses_use_after_close_and_bad_seed() -> None:
    from edgespec.core.errors import EdgespecError

    eng = make_engine()
    with pytest.raises(EdgespecError, match="seed"):
        eng.generate("t5", seed=-1)
    with pytest.raises(EdgespecError, match="empty"):
        eng.generate([])
    eng.close()
    eng.close()  # idempotent
    with pytest.raises(EdgespecError, match="closed"):
        eng.generate("t5 t9", max_tokens=3)
    for use in (
        lambda: eng.tokenize("t5"),
        lambda: eng.piece(5),
        lambda: eng.chat_text([{"role": "user", "content": "t5"}]),
    ):
        with pytest.raises(EdgespecError, match="this engine is closed"):  # on a real model: a segfault
            use()


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("max_tokens", 2.5, "max_tokens must be an integer"),
        ("max_tokens", "5", "max_tokens must be an integer"),
        ("k", 2.5, "k must be an integer"),
        ("seed", 1.5, "seed must be an integer"),
        ("logprobs", 2.5, "logprobs must be an integer"),
        ("temperature", None, "temperature must be a number"),
        ("top_p", "0.9", "top_p must be a number"),
        ("top_k", True, "top_k must be an integer"),
        ("presence_penalty", "x", "presence_penalty must be a number"),
        ("repeat_last_n", 1.5, "repeat_last_n must be an integer"),
    ],
)
def test_an_option_of_the_wrong_type_is_one_clear_error_before_generating(
    option: str, value: object, says: str
) -> None:
    from edgespec.core.errors import EdgespecError

    eng = make_engine()
    with pytest.raises(EdgespecError, match=says):
        eng.generate("t5 t9", **{"max_tokens": 3, option: value})
    with pytest.raises(EdgespecError, match="the prompt must be a string"):
        eng.generate(None, max_tokens=3)  # type: ignore[arg-type]
    assert not eng.busy and eng.generate("t5 t9", max_tokens=3, k=np.int64(2), seed=np.int64(3)).tokens


def test_a_stream_dropped_unfinished_releases_the_engine() -> None:
    # a `break` out of the loop, the handle never closed: nothing else holds it, so it is
    # closed at once (it held the lock until collected, and a collector run never came while
    # the next call waited on the lock: 30 s, then BusyError)
    eng = make_engine(noise=0.5)
    for _ in eng.stream("t5 t9", temperature=0.0, max_tokens=30, k=3):
        break
    assert not eng.busy
    gen = eng.stream("t5 t9", temperature=0.0, max_tokens=30, k=3)
    next(gen)
    eng.cancel()  # reaches a live handle
    del gen
    assert not eng.busy
    eng.cancel()  # nothing running: nothing to do
    again = eng.generate("t5 t9", temperature=0.0, max_tokens=30, k=3)
    assert again.tokens == eng.generate("t5 t9", temperature=0.0, max_tokens=30, speculative=False).tokens


def test_a_stream_kept_and_left_holds_the_engine_and_busy_error_says_whose_it_is(monkeypatch) -> None:
    """A stream kept in a variable holds the engine until closed (another thread may read it on:
    closing it for the next call cut streams read by a thread pool short). BusyError says which
    case it is: this thread's own stream, or another generation."""
    import threading

    from edgespec.core.errors import BusyError

    monkeypatch.setattr("edgespec.api.engine.LOCK_WAIT_S", 0.3)
    eng = make_engine(noise=0.5)
    gen = eng.stream("t5 t9", temperature=0.0, max_tokens=30, k=3)
    for _ in gen:
        break
    with pytest.raises(BusyError, match="a stream read in this thread and left unfinished .* close it"):
        eng.generate("t5", max_tokens=3)
    rest = list(gen)  # still whole: read on after the refusal
    assert rest and rest[-1].finish_reason == "length"
    assert not eng.busy

    held = eng.stream("t5 t9", temperature=0.0, max_tokens=30, k=3)
    threading.Thread(target=lambda: next(held)).start()
    for _ in range(100):
        if eng.busy:
            break
        threading.Event().wait(0.01)
    try:
        with pytest.raises(BusyError, match="another generation has held this engine for 0.3 s"):
            eng.generate("t5", max_tokens=3)
    finally:
        held.close()


def test_adaptive_controller_state_carries_over_between_requests() -> None:
    eng = make_engine(noise=0.3)
    eng.generate("t5 t9", temperature=0.0, max_tokens=40)
    ctrl = eng._adaptive[0.0]
    steps = ctrl.steps
    eng.generate("t7 t9", temperature=0.0, max_tokens=40)
    assert eng._adaptive[0.0] is ctrl and ctrl.steps > steps


def test_cancel_stops_a_long_prefill_between_chunks() -> None:
    target = FakeModel(n_ctx=4096)
    dec = Decoder(target, FakeModel(n_ctx=4096))
    cancel = threading.Event()
    prompt = [1] + [5 + i % 50 for i in range(2000)]

    original = target.eval

    def eval_then_cancel(tokens, pos, logits_from=None):
        out = original(tokens, pos, logits_from)
        cancel.set()
        return out

    target.eval = eval_then_cancel  # type: ignore[method-assign]
    steps = list(decode(dec, prompt, GREEDY, FixedK(4), max_tokens=10, rng=np.random.default_rng(0), cancel=cancel))
    assert steps[-1].finish_reason == "cancelled" and steps[-1].stats.n_generated == 0
    assert len(target.evals) == 1  # one 512-token chunk, not the whole prompt
    assert steps[-1].stats.n_prefilled == target.evals[0][1]  # what was evaluated, and no more
    assert dec.target.tokens == prompt[: len(dec.target.tokens)] and target.kv == dec.target.tokens
