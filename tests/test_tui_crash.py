"""The chat loses nothing: an engine killed mid-reply is an error message and a restart, the
conversation is saved as it goes (one JSON file per chat), `--resume` and `--list` find it,
and a reply runs to the end of the answer.

Fake models in an isolated engine's child for the crash (tests.fakes:make_slow_engine); the
real demo pair for the same bar in one `real` test.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from edgespec import EdgespecError, Engine, IsolatedEngine
from edgespec.api.isolated import ChildSpec
from edgespec_tui.app import ChatApp, ChatOptions, create_app
from edgespec_tui.cli import main as chat_main
from edgespec_tui.store import ChatFile, chats_dir, find_chat, list_chats
from tests.conftest import demo_paths
from tests.fakes import make_engine, make_slow_engine

SIZE = (100, 30)
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def options(tmp: Path, **kw: object) -> ChatOptions:
    base: dict[str, object] = dict(seed=0, k=4, timings=False, sys_reader=lambda: (1e6, 1.0), chats_dir=tmp)
    base.update(kw)
    return ChatOptions(**base)  # type: ignore[arg-type]


def saved(directory: Path) -> list[dict]:
    (path,) = directory.glob("*.json")
    return json.loads(path.read_text())["messages"]  # type: ignore[no-any-return]


async def settle(pilot, app: ChatApp) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.pause()


async def send(pilot, app: ChatApp, text: str) -> None:
    app.query_one("#prompt").value = text
    await pilot.press("enter")
    await settle(pilot, app)


async def start_reply(pilot, app: ChatApp, text: str, within_s: float = 60) -> None:
    """Send `text` and return once the reply has some text (it is still generating)."""
    app.query_one("#prompt").value = text
    await pilot.press("enter")
    t0 = time.monotonic()
    while not app.messages("assistant")[-1].text:
        assert time.monotonic() - t0 < within_s
        await asyncio.sleep(0.02)
    assert app.generating


async def wait_until(condition, within_s: float) -> float:
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < within_s
        await asyncio.sleep(0.02)
    return time.monotonic() - t0


QUESTIONS = ("first question", "second question", "third question")


async def crash_mid_reply(
    pilot, app: ChatApp, engine: IsolatedEngine, tmp: Path, questions: tuple[str, str, str] = QUESTIONS
) -> None:
    """The bar: one finished turn, a second killed mid-reply; both stay on screen and on disk,
    the engine comes back, the next turn is answered."""
    await start_reply(pilot, app, questions[0])
    await pilot.press("escape")  # a finished turn (stopped by the user)
    await settle(pilot, app)
    first = list(app.history)
    assert len(first) == 2 and saved(tmp) == first
    await start_reply(pilot, app, questions[1])
    pid = engine.pid
    assert pid is not None and pid != os.getpid()
    os.kill(pid, signal.SIGKILL)
    assert await wait_until(lambda: not app.generating, 5) < 5
    await settle(pilot, app)
    (error,) = app.messages("error")
    assert "engine process died" in error.text and "SIGKILL" in error.text
    users = [m.text for m in app.messages("user")]
    assert users == list(questions[:2])
    assert app.history[:2] == first and saved(tmp) == app.history  # the partial reply is kept, marked [error]
    await wait_until(lambda: engine.state == "ok", 60)
    app.options.max_tokens = 8
    await send(pilot, app, questions[2])
    assert app.last_reason in ("length", "stop") and len(app.history) == 6 and saved(tmp) == app.history


@pytest.mark.slow  # several seconds of processes or sleeps: `make test` runs it
async def test_sigkill_mid_reply_is_an_error_message_and_the_conversation_stays(tmp_path: Path) -> None:
    engine = IsolatedEngine(ChildSpec(factory="tests.fakes:make_slow_engine", kwargs={"delay": 0.02}))
    try:
        app = create_app(engine, options=options(tmp_path))
        async with app.run_test(size=SIZE) as pilot:
            await crash_mid_reply(pilot, app, engine, tmp_path)
    finally:
        engine.close()


LONG_ANSWERS = (
    "Tell me a long story about a lighthouse keeper, in many paragraphs.",
    "Now tell me a long story about a sailor who visits him, in many paragraphs.",
    "Thank you.",
)


@pytest.mark.real
async def test_real_pair_sigkill_mid_reply_keeps_the_conversation(tmp_path: Path) -> None:
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared")
    engine = Engine.load(paths[0], paths[1], n_ctx=2048, isolated=True)
    assert isinstance(engine, IsolatedEngine)
    try:
        # Greedy, and asked for a long answer: a short sampled reply can end before the kill
        # (CI once got "second question" answered in the time between two polls).
        app = create_app(engine, options=options(tmp_path, k=None, seed=0, temperature=0.0))
        async with app.run_test(size=SIZE) as pilot:
            await crash_mid_reply(pilot, app, engine, tmp_path, LONG_ANSWERS)
    finally:
        engine.close()


async def test_a_reply_runs_to_the_end_of_the_context_not_to_256_tokens(tmp_path: Path) -> None:
    app = create_app(make_engine(n_ctx=512), options=options(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "t5 t6")
        assert app.last_reason == "length" and app.last_stats.n_generated > 256
        assert "context is full" in app.messages("assistant")[0].meta


@pytest.mark.slow  # several seconds of processes or sleeps: `make test` runs it
async def test_the_user_message_is_on_disk_before_the_reply_starts(tmp_path: Path) -> None:
    app = create_app(make_slow_engine(0.02), options=options(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#prompt").value = "t5 t6"
        await pilot.press("enter")
        assert app.generating and saved(tmp_path) == [{"role": "user", "content": "t5 t6"}]
        await pilot.press("escape")
        await settle(pilot, app)
        assert saved(tmp_path) == app.history and len(app.history) == 2


async def test_resume_shows_the_chat_and_continues_the_same_file(tmp_path: Path) -> None:
    app = create_app(make_engine(), options=options(tmp_path, max_tokens=8))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "t5 t6")
        await send(pilot, app, "t7")
    history = app.history
    chat = find_chat(None, tmp_path)
    assert chat.messages == history and chat.model == "fake"
    again = create_app(make_engine(), options=options(tmp_path, max_tokens=8, resume=chat))
    async with again.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert again.history == history
        assert [m.text for m in again.messages("user")] == ["t5 t6", "t7"]
        await send(pilot, again, "t9")
        assert len(again.history) == 6
    assert len(list(tmp_path.glob("*.json"))) == 1 and saved(tmp_path) == again.history


async def test_a_resumed_message_without_a_reply_goes_back_to_the_prompt(tmp_path: Path) -> None:
    ChatFile(tmp_path, model="fake").save([{"role": "user", "content": "t5 t6"}])
    app = create_app(make_engine(), options=options(tmp_path, resume=find_chat(None, tmp_path)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.history == [] and app.query_one("#prompt").value == "t5 t6"


async def test_a_resumed_turn_with_no_reply_says_so(tmp_path: Path) -> None:
    turns = [("user", "t5 t6"), ("assistant", ""), ("user", "t7"), ("assistant", "t8")]
    ChatFile(tmp_path, model="fake").save([{"role": r, "content": c} for r, c in turns])
    app = create_app(make_engine(), options=options(tmp_path, resume=find_chat(None, tmp_path)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        first, second = app.messages("assistant")
        assert first.meta == "[no reply]" and "…" not in first.content.plain and second.meta == ""


async def test_a_message_taken_back_stays_saved_as_the_unanswered_one(tmp_path: Path) -> None:
    long = " ".join(f"t{i}" for i in range(5, 30))  # too long for the context: it comes back to the box
    app = create_app(make_engine(n_ctx=16), options=options(tmp_path, max_tokens=8))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, long)  # the first message of the chat
        assert app.messages("error") and app.history == []
    assert saved(tmp_path) == [{"role": "user", "content": long}]
    again = create_app(make_engine(n_ctx=16), options=options(tmp_path, max_tokens=8, resume=find_chat(None, tmp_path)))
    async with again.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert again.query_one("#prompt").value == long  # back in the box
        await pilot.press("enter")  # refused again: the resumed chat keeps it (its file was deleted)
        await settle(pilot, again)
        assert again.messages("error") and again.query_one("#prompt").value == long
    assert saved(tmp_path) == [{"role": "user", "content": long}]
    third = create_app(make_engine(), options=options(tmp_path, max_tokens=4, resume=find_chat(None, tmp_path)))
    async with third.run_test(size=SIZE) as pilot:
        await pilot.pause()
        third.query_one("#prompt").value = "t5"  # the user writes something shorter instead
        await pilot.press("enter")
        await settle(pilot, third)
    assert [m["content"] for m in saved(tmp_path)][0] == "t5" and len(saved(tmp_path)) == 2


async def test_new_chat_starts_a_new_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    app = create_app(make_engine(), options=options(tmp_path, max_tokens=8))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "t5")
        await pilot.press("ctrl+n")
        await pilot.pause()
        await send(pilot, app, "t6")
    chats = list_chats(tmp_path)
    assert len(chats) == 2 and {c.messages[0]["content"] for c in chats} == {"t5", "t6"}


async def test_a_chat_that_cannot_be_saved_says_so_once_and_goes_on(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    app = create_app(make_engine(), options=options(blocker / "chats", max_tokens=8))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "t5")
        await send(pilot, app, "t6")
        errors = app.messages("error")
        assert len(errors) == 1 and "could not save" in errors[0].text
        assert len(app.history) == 4


def test_a_failed_write_leaves_the_previous_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = ChatFile(tmp_path, model="m")
    f.save([{"role": "user", "content": "kept"}])

    def broken(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError):
        f.save([{"role": "user", "content": "kept"}, {"role": "assistant", "content": "lost"}])
    assert saved(tmp_path) == [{"role": "user", "content": "kept"}]
    assert [p.name for p in tmp_path.iterdir()] == [f.path.name]  # no temporary file left


def test_list_and_resume_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert chat_main(["--list"]) == 0
    assert capsys.readouterr().out.startswith(f"no saved chats in {chats_dir()}")
    ChatFile(chats_dir(), model="m").save([{"role": "user", "content": "why is the sky blue at noon"}])
    assert chat_main(["--list"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(find_chat(None).id) and "why is the sky blue" in line
    assert chat_main(["--resume", "no-such-chat"]) == 2
    assert "no saved chat with id 'no-such-chat'" in capsys.readouterr().err


def test_a_chat_file_that_cannot_be_read_is_named_not_denied(capsys: pytest.CaptureFixture[str]) -> None:
    chats_dir().mkdir(parents=True, exist_ok=True)
    (chats_dir() / "20991231-000000-bad0.json").write_text("{bad json")
    assert chat_main(["--list"]) == 0
    out = capsys.readouterr()
    assert "no saved chats" in out.out and "20991231-000000-bad0.json cannot be read" in out.err
    assert chat_main(["--resume", "20991231"]) == 2
    err = capsys.readouterr().err
    assert "20991231-000000-bad0.json cannot be read (JSONDecodeError" in err and "fix or remove" in err
    (chats_dir() / "20991231-000000-bad0.json").write_text(json.dumps({"updated": None, "messages": []}))
    ChatFile(chats_dir(), model="m").save([{"role": "user", "content": "a readable chat beside it"}])
    assert chat_main(["--list"]) == 0  # a field of the wrong kind is a file that cannot be read, not a crash
    out = capsys.readouterr()
    assert "a readable chat beside it" in out.out and "cannot be read (TypeError: 'updated' is NoneType" in out.err


def test_resume_without_an_id_says_when_a_newer_file_cannot_be_read(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # it went to the newest readable chat without a word: the chat meant may be the broken one
    ChatFile(chats_dir(), model="m").save([{"role": "user", "content": "an older chat"}])
    older = find_chat(None)
    newer = chats_dir() / "20991231-000000-bad1.json"
    newer.write_text("{bad json")
    os.utime(newer, (time.time() + 60, time.time() + 60))
    said: list[str] = []
    assert find_chat(None, warn=said.append).id == older.id
    assert len(said) == 1 and f"{newer} is newer but cannot be read (JSONDecodeError" in said[0]
    assert older.id in said[0]

    def no_models(*_: object, **__: object) -> None:
        raise EdgespecError("not loading models here")

    monkeypatch.setattr("edgespec.frontends.options.engine_from_args", no_models)
    assert chat_main(["--resume"]) == 2  # the command line says it before the models load
    assert "is newer but cannot be read" in capsys.readouterr().err
    os.utime(newer, (time.time() - 3600, time.time() - 3600))  # an older broken file is no news
    said.clear()
    assert find_chat(None, warn=said.append).id == older.id and not said


def test_a_home_that_is_a_file_is_one_line_for_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "file"))
    assert chat_main(["--list"]) == 2
    assert "is not a folder" in capsys.readouterr().err
