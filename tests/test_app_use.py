"""The engine as an app uses it from threads: a window closed while a request starts or a
stream is read, a Stop button that calls close(), an engine dropped unclosed, and options of
the wrong type. Each ends in one clear error or a cancelled stream, never native code reading
freed models (a segfault on the real backend)."""

from __future__ import annotations

import threading
import time

import pytest

from edgespec.api.engine import Engine
from edgespec.core.errors import EdgespecError
from tests.fakes import FakeModel, make_engine, make_slow_engine


class Freed(FakeModel):
    """A model that says so when it is read after close() (llama.cpp would read freed memory)."""

    def __init__(self, tokenize_s: float = 0.0, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.tokenize_s, self.freed, self.read_after_free = tokenize_s, False, False

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        time.sleep(self.tokenize_s)
        self.read_after_free |= self.freed
        return super().tokenize(text, add_special=add_special, parse_special=parse_special)

    def piece(self, token: int, special: bool = False) -> bytes:
        self.read_after_free |= self.freed
        return super().piece(token, special)

    def close(self) -> None:
        self.freed = True


def test_close_waits_for_a_tokenize_under_way_in_another_thread() -> None:
    target = Freed(tokenize_s=0.3)
    eng = Engine(target, FakeModel(noise=0.5))
    seen: list[object] = []
    worker = threading.Thread(target=lambda: seen.append(eng.tokenize("t5 t9")))
    worker.start()
    time.sleep(0.1)  # the tokenize is under way
    eng.close()
    worker.join()
    assert target.freed and not target.read_after_free
    assert isinstance(seen[0], list)  # it finished on live models
    with pytest.raises(EdgespecError, match="this engine is closed"):
        eng.tokenize("t5")


def test_close_while_a_stream_starts_in_another_thread_is_one_clear_error() -> None:
    target = Freed(tokenize_s=0.2)
    eng = Engine(target, FakeModel(noise=0.5))
    errors: list[BaseException] = []

    def start() -> None:
        try:
            eng.generate("t5 t9", max_tokens=5)
        except EdgespecError as err:
            errors.append(err)

    worker = threading.Thread(target=start)
    worker.start()
    time.sleep(0.05)
    eng.close()
    worker.join()
    assert not target.read_after_free
    assert not errors or "closed" in str(errors[0])  # it ran first, or met a closed engine


@pytest.mark.parametrize("token", [64, -1, 2**40, 2.5, True])
def test_piece_of_a_token_outside_the_vocabulary_is_one_clear_error(token: object) -> None:
    eng = make_engine()  # on llama.cpp: std::out_of_range, an abort of the process
    with pytest.raises(EdgespecError, match="outside the vocabulary"):
        eng.piece(token)  # type: ignore[arg-type]
    assert eng.piece(5) == b"t5 "


def test_close_ends_a_stream_this_thread_left_unfinished() -> None:
    # an app's own error inside `with Engine(...) as e:` after reading one event: close()
    # waited 30 s on the stream's lock, then replaced the app's error with BusyError
    eng = make_engine(noise=0.5)
    gen = eng.stream("t5 t9", temperature=0.0, max_tokens=30, k=3)
    next(gen)
    t0 = time.monotonic()
    eng.close()
    assert time.monotonic() - t0 < 1.0 and eng.state == "closed" and not eng.busy
    rest = list(gen)  # read on, it ends as a cancelled stream does
    assert [e.finish_reason for e in rest] == ["cancelled"]


def test_close_cancels_a_stream_read_in_another_thread() -> None:
    eng = make_engine(noise=0.5)
    gen = eng.stream("t5 t9", temperature=0.8, max_tokens=400, k=3, seed=1)
    finishes: list[str | None] = []

    def read() -> None:
        for event in gen:
            finishes.append(event.finish_reason)
            time.sleep(0.01)  # a slow reader: most of the time between two reads

    worker = threading.Thread(target=read)
    worker.start()
    time.sleep(0.1)
    eng.close()
    worker.join(5)
    assert not worker.is_alive() and eng.state == "closed"
    assert finishes[-1] == "cancelled" and finishes.count("cancelled") == 1


def test_gen_close_from_another_thread_stops_the_stream_a_worker_reads() -> None:
    # a Stop button calling close(): "generator already executing" on every try, and the
    # stream ran to its end
    eng = make_slow_engine(delay=0.005)  # each step under way most of the time
    gen = eng.stream("t5 t9", temperature=0.8, max_tokens=400, k=3, seed=1)
    events: list[str | None] = []
    worker = threading.Thread(target=lambda: events.extend(e.finish_reason for e in gen))
    worker.start()
    time.sleep(0.05)
    gen.close()
    worker.join(5)
    assert events[-1] == "cancelled" and len(events) < 400
    assert not eng.busy
    assert eng.generate("t5 t9", max_tokens=3).finish_reason == "length"


def test_the_last_event_comes_with_the_engine_released() -> None:
    # a reader that stops at the event with finish_reason (and keeps the handle) holds nothing
    eng = make_engine(noise=0.5)
    gen = eng.stream("t5 t9", temperature=0.0, max_tokens=12, k=3)
    while next(gen).finish_reason is None:
        pass
    assert not eng.busy
    assert eng.generate("t5 t9", max_tokens=3).tokens


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"stop": 5}, "stop must be a string or a list of strings .got int"),
        ({"stop": b"."}, "stop must be .* .got bytes"),
        ({"stop": [".", 1]}, "stop must be .* .got a list holding int"),
        ({"logit_bias": [(5, 1.0)]}, "logit_bias must map token ids to biases .got list"),
    ],
)
def test_stop_and_logit_bias_of_the_wrong_type_are_one_clear_error(options: dict, says: str) -> None:
    eng = make_engine()
    with pytest.raises(EdgespecError, match=says):
        eng.stream("t5 t9", max_tokens=3, **options)  # before the first event, not at it
    assert not eng.busy


def test_a_bytes_prompt_is_refused_not_read_as_token_ids() -> None:
    eng = make_engine()
    with pytest.raises(EdgespecError, match=r"got bytes\); decode it to str first"):
        eng.generate(b"t5 t9", max_tokens=3)  # type: ignore[arg-type]
    assert eng.generate(iter([5, 9]), max_tokens=3).tokens  # any iterable of ids still is one


@pytest.mark.parametrize("p_min", [float("nan"), 5.0, -0.1, "0.5"])
def test_p_min_out_of_range_is_refused_at_load(p_min: object) -> None:
    with pytest.raises(EdgespecError, match="p_min must be"):
        Engine(FakeModel(), FakeModel(noise=0.5), p_min=p_min)  # type: ignore[arg-type]


def test_a_seed_too_large_names_the_range() -> None:
    with pytest.raises(EdgespecError, match=r"seed must be an integer from 0 to 2\*\*63 - 1"):
        make_engine().generate("t5", seed=2**63)  # "a non-negative integer" did not say what was wrong


def test_close_wins_over_a_stream_waiting_for_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    # the waiting stream took the engine first, ran to its end, and close() gave up with BusyError
    monkeypatch.setattr("edgespec.api.engine.LOCK_WAIT_S", 2.0)
    eng = make_slow_engine(delay=0.01)
    first = eng.stream("t5 t9", temperature=0.8, max_tokens=2000, k=3, seed=1)
    waiting = eng.stream("t5 t9", temperature=0.8, max_tokens=2000, k=3, seed=2)
    got: dict[str, object] = {}

    def read(name: str, gen: object) -> None:
        try:
            got[name] = [e.finish_reason for e in gen][-1]  # type: ignore[attr-defined]
        except EdgespecError as err:
            got[name] = str(err)

    readers = [threading.Thread(target=read, args=pair) for pair in (("first", first), ("waiting", waiting))]
    for reader in readers:
        reader.start()
        time.sleep(0.1)  # the second waits in the engine's lock
    eng.close()
    for reader in readers:
        reader.join(5)
    assert eng.state == "closed" and got == {"first": "cancelled", "waiting": "this engine is closed; load a new one"}


def test_two_closes_at_once_both_return() -> None:
    eng = make_slow_engine(delay=0.01)
    gen = eng.stream("t5 t9", temperature=0.8, max_tokens=2000, k=3, seed=1)
    reader = threading.Thread(target=lambda: list(gen))
    reader.start()
    time.sleep(0.05)
    errors: list[BaseException] = []

    def close() -> None:
        try:
            eng.close()
        except BaseException as err:  # the second one raised CLOSED
            errors.append(err)

    closers = [threading.Thread(target=close) for _ in range(2)]
    for c in closers:
        c.start()
    for c in [*closers, reader]:
        c.join(5)
    assert not errors and eng.state == "closed"


def test_tokenize_calls_that_keep_overlapping_do_not_hold_a_close_off() -> None:
    target = Freed(tokenize_s=0.05)
    eng = Engine(target, FakeModel(noise=0.5))
    stop = threading.Event()

    def tokenize_on() -> None:
        while not stop.is_set():
            try:
                eng.tokenize("t5")
            except EdgespecError:
                return

    workers = [threading.Thread(target=tokenize_on) for _ in range(2)]
    for w in workers:
        w.start()
        time.sleep(0.02)  # staggered: one is always under way
    threading.Timer(3.0, stop.set).start()  # (where a close waits for a gap, the loops end in 3 s)
    t0 = time.monotonic()
    eng.close()  # waited until the loops stopped (4 s in a review's run)
    waited = time.monotonic() - t0
    for w in workers:
        w.join(5)
    assert waited < 1.0 and not target.read_after_free
