"""The isolated engine over fake models: same answers as in process, and crashes that end
one request with `EngineCrashed`, restart the child, and leave this process alone."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from edgespec import EdgespecError, Engine, EngineCrashed, IsolatedEngine
from edgespec.api.isolated import ChildSpec
from edgespec.core.errors import ContextFullError, ModelFileError
from tests.fakes import make_engine


def isolated(factory: str = "tests.fakes:make_slow_engine", **kw: object) -> IsolatedEngine:
    grace = float(kw.pop("cancel_grace_s", 5.0))  # type: ignore[arg-type]
    restarts = int(kw.pop("restarts", 5))  # type: ignore[call-overload]
    retry = float(kw.pop("retry_failed_s", 30.0))  # type: ignore[arg-type]
    return IsolatedEngine(
        ChildSpec(factory=factory, kwargs=kw),
        cancel_grace_s=grace,
        restarts=restarts,
        backoff_s=0.05,
        retry_failed_s=retry,
    )


def wait_for(engine: IsolatedEngine, state: str, within_s: float) -> float:
    t0 = time.monotonic()
    while engine.state != state:
        assert time.monotonic() - t0 < within_s, f"still {engine.state} after {within_s} s"
        time.sleep(0.02)
    return time.monotonic() - t0


def test_answers_and_facts_are_those_of_the_same_engine_in_process() -> None:
    reference = make_engine()
    with isolated("tests.fakes:make_engine") as engine:
        assert os.getpid() != engine.pid
        assert (engine.name, engine.n_ctx, engine.has_draft, engine.can_speculate, engine.lookup) == (
            "fake",
            reference.n_ctx,
            True,
            True,
            True,
        )
        assert engine.info() == reference.info() and engine.state == "ok"
        for k in (None, 0, 3):
            mine = engine.generate("t5 t6 t7", temperature=0, max_tokens=40, k=k)
            theirs = reference.generate("t5 t6 t7", temperature=0, max_tokens=40, k=k)
            assert (mine.text, mine.tokens, mine.finish_reason) == (theirs.text, theirs.tokens, theirs.finish_reason)
        sampled = engine.generate("t5", seed=3, max_tokens=30, k=3)
        assert sampled.tokens == reference.generate("t5", seed=3, max_tokens=30, k=3).tokens
        assert engine.tokenize("t5 t6", raw=True) == reference.tokenize("t5 t6", raw=True)
        assert engine.piece(9) == reference.piece(9)
        assert engine.chat_text([{"role": "user", "content": "t5"}]) == reference.chat_text(
            [{"role": "user", "content": "t5"}]
        )
        tool = {"type": "function", "function": {"name": "f", "description": "t8"}}
        tools = engine.tools([tool], "required")
        assert tools == reference.tools([tool], "required") and tools is not None
        messages = [{"role": "user", "content": "t5"}]
        assert engine.chat_text(messages, tools=tools) == reference.chat_text(messages, tools=tools)
        assert engine.tokenize(messages, tools=tools) == reference.tokenize(messages, tools=tools)
        engine.reset()
    assert engine.state == "closed"


def test_every_public_engine_member_works_on_the_proxy() -> None:
    """The proxy overrides what would touch the models; the rest only uses what it overrides."""
    inherited_safely = {"generate", "cancel", "busy"}
    public = {n for n in vars(Engine) if not n.startswith("_")}
    missing = public - set(vars(IsolatedEngine)) - inherited_safely
    assert not missing, f"IsolatedEngine does not override {missing}"


def test_user_errors_keep_their_class_and_message() -> None:
    with pytest.raises(ModelFileError, match="does not exist|not found|no such"):
        Engine.load("/nonexistent/model.gguf", isolated=True)
    with isolated(n_ctx=64) as engine:
        with pytest.raises(EdgespecError, match="temperature"):
            engine.stream("t5", temperature=-1)
        with pytest.raises(TypeError):
            engine.stream("t5", temprature=0.5)
        with pytest.raises(EdgespecError, match="outside the vocabulary"):
            engine.stream([1, 999])
        with pytest.raises(ContextFullError):
            engine.generate(" ".join(["t5"] * 80), raw=True)
        # checked before stream() returns, as in process (they came at the first event, or as a TypeError)
        for options, says in (
            ({"logprobs": 99}, "logprobs must be between"),
            ({"presence_penalty": 9}, "presence_penalty must be between"),
            ({"logit_bias": {10**9: 1}}, "not in the vocabulary"),
            ({"stop": [1]}, "stop must be a string or a list of strings"),
        ):
            with pytest.raises(EdgespecError, match=says):
                engine.stream("t5", **options)
        for prompt in (None, 5, b"t5"):
            with pytest.raises(EdgespecError, match="the prompt must be a string"):
                engine.generate(prompt)  # type: ignore[arg-type]
        with pytest.raises(EdgespecError, match="outside the vocabulary"):
            engine.piece(10**6)
        assert engine.generate("t5 t6", temperature=0, max_tokens=5).finish_reason == "length"  # still serving


def test_sigkill_mid_stream_ends_it_with_engine_crashed_and_the_engine_restarts() -> None:
    with isolated(delay=0.01) as engine:
        first_pid = engine.pid
        gen = engine.stream("t5 t6", temperature=0, max_tokens=2000)
        next(gen)
        assert first_pid is not None
        os.kill(first_pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(EngineCrashed, match="SIGKILL") as err:
            for _ in gen:
                pass
        assert time.monotonic() - t0 < 5
        assert "\n" not in str(err.value) and err.value.retry_after >= 1
        gen.close()
        assert engine.state in ("restarting", "ok")
        wait_for(engine, "ok", 60)
        assert engine.pid != first_pid
        result = engine.generate("t5 t6 t7", temperature=0, max_tokens=20)
        assert result.text == make_engine().generate("t5 t6 t7", temperature=0, max_tokens=20).text


def test_calls_while_restarting_say_so_at_once() -> None:
    with isolated(delay=0.01) as engine:
        pid = engine.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        while engine.state == "ok":
            time.sleep(0.005)
        t0 = time.monotonic()
        with pytest.raises(EngineCrashed, match="restarting|died"):
            engine.generate("t5")
        assert time.monotonic() - t0 < 1
        wait_for(engine, "ok", 60)


def test_an_abort_in_native_code_is_a_crash_with_its_signal_logged(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    with isolated(abort_at=5) as engine:
        with pytest.raises(EngineCrashed, match="SIGABRT") as err:
            engine.generate("t5 t6", temperature=0, max_tokens=200, k=0)
        wait_for(engine, "ok", 60)
    # what native code printed as it died is in the one line, not on the terminal before it
    assert "killed by SIGABRT: ggml.c:1234: GGML_ASSERT(ne % 32 == 0) failed" in str(err.value)
    assert "GGML_ASSERT" not in capfd.readouterr().err
    assert any("SIGABRT" in r.getMessage() for r in caplog.records)
    # the operator of a server, which shows errors only, hears of the restart as of the crash
    assert any("the engine restarted in" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)


@pytest.mark.slow  # several seconds of processes or sleeps: `make test` runs it
def test_a_cancel_that_native_code_ignores_kills_and_restarts_the_child() -> None:
    with isolated(hang_at=4, cancel_grace_s=1.0) as engine:
        pid = engine.pid
        gen = engine.stream("t5 t6", temperature=0, max_tokens=200, k=0)
        events = [next(gen), next(gen)]
        time.sleep(0.3)  # the child runs ahead into the eval that hangs
        gen.cancel()
        t0 = time.monotonic()
        events += list(gen)
        assert events[-1].finish_reason == "cancelled"
        assert 0.9 < time.monotonic() - t0 < 4
        wait_for(engine, "ok", 60)
        assert engine.pid != pid


@pytest.mark.slow  # steps of 0.3 s
def test_a_cancel_waits_for_a_step_that_is_only_slow() -> None:
    # a loaded machine's step outlasts the grace: three of the recent steps' time are allowed
    with isolated(delay=0.3, cancel_grace_s=0.2) as engine:
        pid = engine.pid
        gen = engine.stream("t5 t6", temperature=0, max_tokens=200, k=0)
        events = [next(gen), next(gen), next(gen)]  # each a 0.3 s step: the next one is under way
        gen.cancel()
        events += list(gen)
        assert events[-1].finish_reason == "cancelled"
        assert engine.pid == pid and engine.state == "ok"  # not killed and restarted


@pytest.mark.slow  # a 2 s prefill
def test_a_long_prefill_does_not_stretch_the_grace_of_a_hung_step() -> None:
    # the prefill is no step: a child that hangs after it is killed within the grace, not 3 prefills
    with isolated(hang_at=10, prefill_s=2.0, cancel_grace_s=0.5) as engine:
        gen = engine.stream(" ".join(f"t{i}" for i in range(5, 30)), temperature=0, max_tokens=200, k=0)
        events = [next(gen) for _ in range(3)]
        time.sleep(0.5)  # it hangs by now
        gen.cancel()
        t0 = time.monotonic()
        events += list(gen)
        assert events[-1].finish_reason == "cancelled" and time.monotonic() - t0 < 2.5


def test_closing_a_stream_early_leaves_the_engine_ready_for_the_next() -> None:
    with isolated(delay=0.005) as engine:
        with engine.stream("t5 t6", temperature=0, max_tokens=500) as gen:
            next(gen)
        assert not engine.busy
        again = engine.generate("t5 t6 t7", temperature=0, max_tokens=20)
        assert again.text == make_engine().generate("t5 t6 t7", temperature=0, max_tokens=20).text


def test_a_stream_dropped_unfinished_releases_the_engine() -> None:
    # a `break` out of the loop, the handle never closed: the engine stayed locked for good
    with isolated(delay=0.005) as engine:
        for _ in engine.stream("t5 t6", temperature=0, max_tokens=500):
            break
        assert not engine.busy
        again = engine.generate("t5 t6 t7", temperature=0, max_tokens=20)
        assert again.text == make_engine().generate("t5 t6 t7", temperature=0, max_tokens=20).text


def test_restarts_are_bounded_and_then_every_call_says_the_engine_failed(tmp_path: Path) -> None:
    with isolated(once=str(tmp_path / "loaded"), restarts=2) as engine:
        pid = engine.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_for(engine, "failed", 30)
        with pytest.raises(EngineCrashed, match="could not be restarted.*models are gone.*tries again"):
            engine.generate("t5")


def test_a_failed_engine_tries_again_at_a_later_call_and_comes_back(tmp_path: Path) -> None:
    # the RPC server the target's layers were on rebooted for 15 s: every restart failed, and the
    # engine (a server with it) said "failed" for good though the server was back
    gone = tmp_path / "loaded"
    with isolated(once=str(gone), restarts=2, retry_failed_s=0.5) as engine:
        os.kill(engine.pid, signal.SIGKILL)  # type: ignore[arg-type]
        wait_for(engine, "failed", 30)
        with pytest.raises(EngineCrashed, match=r"a call in 1 s or later tries again") as err:
            engine.generate("t5")
        assert err.value.retry_after == 1
        gone.unlink()  # what failed is back
        time.sleep(0.6)
        with pytest.raises(EngineCrashed, match="restarting"):
            engine.generate("t5")  # this call starts a new round
        wait_for(engine, "ok", 30)
        assert engine.generate("t5 t6", temperature=0, max_tokens=5).text


def test_closing_ends_the_child_process() -> None:
    engine = isolated()
    process = engine._child.process
    engine.close()
    process.join(5)  # close() returns once the reader thread has reaped the child
    assert not process.is_alive() and engine.state == "closed"
    with pytest.raises(EdgespecError, match="closed"):
        engine.generate("t5")


@pytest.mark.slow  # several seconds of processes or sleeps: `make test` runs it
def test_the_child_does_not_outlive_a_parent_that_was_killed() -> None:
    import subprocess
    import sys

    import psutil

    code = (
        "from tests.test_isolated import isolated\n"
        "e = isolated()\n"
        "print(e.pid, flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        parent.kill()
        parent.wait(10)
        child.wait(10)  # psutil.TimeoutExpired if it lingers
    finally:
        parent.kill()


def test_serve_and_chat_run_the_engine_isolated_unless_told_otherwise() -> None:
    import argparse

    from edgespec.frontends.server.command import add_parser as add_serve
    from edgespec_tui.cli import add_parser as add_chat

    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    add_serve(sub)
    add_chat(sub)
    assert p.parse_args(["serve"]).in_process is False and p.parse_args(["serve", "--in-process"]).in_process
    chat = p.parse_args(["chat"])
    assert chat.in_process is False and chat.max_tokens is None and chat.resume is None
    assert p.parse_args(["chat", "--resume"]).resume == "" and p.parse_args(["chat", "--resume", "x"]).resume == "x"


def test_a_child_that_dies_while_loading_is_an_error_at_load_time() -> None:
    with pytest.raises(EngineCrashed, match="while loading the models.*SIGABRT"):
        IsolatedEngine(ChildSpec(factory="os:abort"))
    # exit code 1: what a script that loads the engine at import time makes of the child
    with pytest.raises(EngineCrashed, match='code 1.*outside `if __name__ == "__main__":`, move it there'):
        IsolatedEngine(ChildSpec(factory="tests.fakes:exit_one"))


def test_an_engine_dropped_unclosed_ends_its_child() -> None:
    import gc

    from edgespec.api.isolated import _OPEN

    engine = isolated()
    process = engine._child.process
    del engine
    gc.collect()
    process.join(10)
    assert not process.is_alive() and not list(_OPEN)  # it held about 0.9 GB per engine on the demo pair


def test_close_waits_for_a_call_under_way_then_calls_say_closed() -> None:
    # the child freed its models under a tokenize (a segfault on llama.cpp), and the call in
    # flight read "the engine process died ...; it is restarting" from an engine closed on purpose
    import threading

    engine = isolated(tokenize_s=0.5)
    got: list[object] = []
    worker = threading.Thread(target=lambda: got.append(engine.tokenize("t5 t6", raw=True)))
    worker.start()
    time.sleep(0.2)
    engine.close()
    worker.join(10)
    assert got == [[1, 5, 6]]  # BOS, t5, t6: it finished on live models
    with pytest.raises(EdgespecError, match="this engine is closed") as err:
        engine.tokenize("t5")
    assert type(err.value) is EdgespecError


def test_a_script_that_ends_without_closing_its_engine_ends_quietly() -> None:
    """multiprocessing's exit handler killed the child, which read as a crash: "the engine
    process died (killed by SIGTERM); restarting it", a child started during shutdown, a traceback."""
    import subprocess
    import sys

    code = (
        "import logging; logging.basicConfig()\n"
        "from tests.test_isolated import isolated\n"
        "e = isolated()\n"
        "print(e.generate('t5 t6', max_tokens=3, temperature=0).text, flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip()
    assert done.stderr == "", done.stderr


def test_a_call_the_child_never_answers_restarts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stopped child answered nothing for 120 s per call, and stayed "ok" afterwards."""
    monkeypatch.setattr("edgespec.api.isolated.CALL_TIMEOUT_S", 0.5)
    with isolated() as engine:
        stuck = engine.pid
        assert stuck is not None
        os.kill(stuck, signal.SIGSTOP)
        try:
            with pytest.raises(EngineCrashed, match=r"did not answer \(tokenize\) within 0.5 s; it is being restarted"):
                engine.tokenize("t5", raw=True)
            t0 = time.monotonic()
            while engine.pid == stuck or engine.state != "ok":
                assert time.monotonic() - t0 < 30, f"still {engine.state}, process {engine.pid}"
                time.sleep(0.02)
            assert engine.tokenize("t5", raw=True)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stuck, signal.SIGCONT)


def test_last_words_are_the_line_that_says_what_failed(tmp_path: Path) -> None:
    from edgespec.api.process import last_words

    f = tmp_path / "stderr"
    f.write_text("loading\nggml.c:99: GGML_ASSERT(x) failed\n#3 0x7f in abort ()\n")
    assert last_words(str(f)) == "ggml.c:99: GGML_ASSERT(x) failed"  # not the backtrace after it
    f.write_text("some note\n\n  the   last  line \n")
    assert last_words(str(f)) == "the last line"
    f.write_text("")
    assert last_words(str(f)) == "" and last_words(str(tmp_path / "none")) == ""
