"""The chat app driven by Textual's Pilot over a real Engine on fake models (tests/fakes.py)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from rich.text import Text
from textual import events

from edgespec import EngineInfo, GpuOffload, PairVerdict
from edgespec.api.engine import Engine
from edgespec.core.errors import EdgespecError
from edgespec_tui.app import ChatApp, ChatOptions, create_app
from edgespec_tui.cli import add_parser
from edgespec_tui.store import list_chats
from edgespec_tui.text import info_text, stats_line, to_markdown, visible
from edgespec_tui.widgets import InfoScreen, MessageView
from tests.fakes import FakeModel, make_engine

SIZE = (100, 30)
pytestmark = pytest.mark.anyio  # the async tests run on asyncio through anyio's pytest plugin


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def options(**kw: object) -> ChatOptions:
    base: dict[str, object] = dict(seed=0, k=4, max_tokens=24, timings=False, sys_reader=lambda: (123e6, 42.0))
    base.update(kw)
    return ChatOptions(**base)  # type: ignore[arg-type]


async def settle(pilot, app: ChatApp) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.pause()


async def send(pilot, app: ChatApp, text: str) -> None:
    app.query_one("#prompt").value = text
    await pilot.press("enter")
    await settle(pilot, app)


class SlowModel(FakeModel):
    """A fake whose every forward pass takes a while, so keys land mid-generation."""

    delay = 0.01

    def eval(self, tokens, pos, logits_from=None):
        time.sleep(self.delay)
        return super().eval(tokens, pos, logits_from)


class GatedModel(FakeModel):
    """A fake whose every forward pass waits for `gate`: keys land while its prefill runs."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.gate = threading.Event()

    def eval(self, tokens, pos, logits_from=None):
        self.gate.wait(10)
        return super().eval(tokens, pos, logits_from)


class MarkupModel(FakeModel):
    def piece(self, token: int, special: bool = False) -> bytes:
        return b"" if token < 3 and not special else b"[bold]x[/bold] \x1b[31m"


def slow_engine() -> Engine:
    return Engine(SlowModel(n_ctx=4096), SlowModel(noise=0.5, n_ctx=4096), name="slow")  # type: ignore[arg-type]


def body(view: MessageView) -> str:
    content = view.content
    assert isinstance(content, Text)
    return content.plain


# -- sending and streaming -------------------------------------------------------------------


async def test_send_streams_one_update_per_step() -> None:
    steps: list[ChatApp.Step] = []
    app = create_app(make_engine(), options=options())
    hook = lambda m: steps.append(m) if isinstance(m, ChatApp.Step) else None  # noqa: E731
    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await send(pilot, app, "t5 t6")
        assert [m["role"] for m in app.history] == ["user", "assistant"]
        assert app.history[0]["content"] == "t5 t6"
        reply = app.messages("assistant")[0]
        assert reply.text == app.history[1]["content"] != ""
        assert reply.text.startswith("t") and reply.text.split()[0][1:].isdigit()
        stats = app.last_stats
        assert stats.n_generated == 24 and stats.n_drafted > 0
        assert app.last_reason == "length"
        # one UI message per speculative step, several tokens each (not per character)
        assert len(steps) == stats.steps < stats.n_generated
        assert "".join(s for m in steps for s, _ in m.segments) == reply.text
        assert "max tokens (24)" in reply.meta and "accept" in reply.meta
        assert not app.generating and app.query_one("#prompt").value == ""


async def test_follow_up_prefills_only_the_new_turn() -> None:
    app = create_app(make_engine(), options=options())
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "t5 t6")
        first = app.last_stats
        await send(pilot, app, "t7 t8 t9")
        second = app.last_stats
        assert len(app.history) == 4
        assert second.n_prompt > first.n_prompt + first.n_generated
        assert second.n_prefilled < second.n_prompt / 2


async def test_draft_and_target_tokens_are_split() -> None:
    app = create_app(make_engine(), options=options())
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "t5 t6")
        reply = app.messages("assistant")[0]
        sources = {s.source for s in reply.segments}
        assert sources == {"draft", "target"}
        # every step ends with the target's own token (correction or bonus)
        assert reply.segments[-1].source == "target" or app.last_reason == "length"
        spans = body_spans(reply)
        assert {s.style for s in spans} == {
            reply.get_component_rich_style("message--draft"),
            reply.get_component_rich_style("message--target"),
        }


def body_spans(view: MessageView) -> list:
    content = view.content
    assert isinstance(content, Text)
    meta = view.get_component_rich_style("message--meta")
    return [s for s in content.spans if s.style != meta]


async def test_markup_and_escape_codes_in_output_are_shown_literally() -> None:
    engine = Engine(MarkupModel(), MarkupModel(noise=0.5), name="markup")  # type: ignore[arg-type]
    app = create_app(engine, options=options(max_tokens=3))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "t5 [red]hi[/red]")
        reply = app.messages("assistant")[0]
        assert reply.text == "[bold]x[/bold] \x1b[31m" * 3
        shown = body(reply)
        assert "[bold]x[/bold] ␛[31m" in shown and "\x1b" not in shown
        assert "[red]hi[/red]" in body(app.messages("user")[0])
        assert "\x1b" not in app.export_screenshot()


# -- keys --------------------------------------------------------------------------------------


async def _mid_reply(app: ChatApp, pilot) -> None:
    """Send a message and return once its reply has some text and is still going."""
    app.query_one("#prompt").value = "t5 t6"
    await pilot.press("enter")
    for _ in range(200):
        await asyncio.sleep(0.02)
        if app.messages("assistant")[0].text:
            break
    assert app.generating


async def test_escape_cancels_quickly_and_keeps_the_text() -> None:
    app = create_app(slow_engine(), options=options(max_tokens=2000))  # K=4: 50 ms steps
    async with app.run_test(size=SIZE) as pilot:
        await _mid_reply(app, pilot)
        t0 = time.monotonic()
        await pilot.press("escape")
        while app.generating and time.monotonic() - t0 < 2:
            await asyncio.sleep(0.01)
        # 20 steps of 50 ms: 0.25 s failed once in a fresh-clone CI run under load, and those runs
        # now take 540 s where they took 420 (Pilot.press itself takes 1.5-2 s while a reply streams)
        assert time.monotonic() - t0 < 1.0
        await settle(pilot, app)
        reply = app.messages("assistant")[0]
        assert app.last_reason == "cancelled" and reply.text
        assert "[stopped]" in reply.meta
        assert app.history[-1] == {"role": "assistant", "content": reply.text}
        assert not app.engine.busy
        app.options.max_tokens = 8
        await send(pilot, app, "t9")  # the conversation goes on
        assert len(app.history) == 4


async def test_new_chat_clears_the_conversation() -> None:
    app = create_app(make_engine(), options=options())
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "t5 t6")
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert app.history == [] and app.messages("assistant") == [] and app.messages("user") == []
        assert app.status.stats is None
        await send(pilot, app, "t5 t6")
        assert len(app.history) == 2


async def test_new_chat_during_a_generation_saves_the_old_reply_and_starts_empty(tmp_path: Path) -> None:
    # the reply so far was lost, from the screen and from the saved chat, where Esc keeps it
    app = create_app(slow_engine(), options=options(max_tokens=2000, chats_dir=tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await _mid_reply(app, pilot)
        await pilot.press("ctrl+n")
        await settle(pilot, app)
        assert app.history == [] and app.messages("assistant") == []
        assert not app.engine.busy
    (old,) = list_chats(tmp_path)
    assert [m["role"] for m in old.messages] == ["user", "assistant"] and old.messages[1]["content"]


async def test_ctrl_q_during_a_reply_saves_what_it_said(tmp_path: Path) -> None:
    app = create_app(slow_engine(), options=options(max_tokens=2000, chats_dir=tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await _mid_reply(app, pilot)
        await pilot.press("ctrl+q")
    (saved,) = list_chats(tmp_path)
    assert [m["role"] for m in saved.messages] == ["user", "assistant"] and saved.messages[1]["content"]


async def test_toggle_speculation_between_replies() -> None:
    app = create_app(make_engine(), options=options())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+t")
        assert app.speculative is False and app.status.speculative is False
        await send(pilot, app, "t5 t6")
        assert app.last_stats.speculative is False and app.last_stats.n_drafted == 0
        assert "plain decoding" in app.messages("assistant")[0].meta
        assert {s.source for s in app.messages("assistant")[0].segments} == {"target"}
        await pilot.press("ctrl+t")
        await send(pilot, app, "t7")
        assert app.last_stats.speculative is True and app.last_stats.n_drafted > 0


@pytest.mark.parametrize("where", ["option", "pair"])
async def test_k_0_reads_as_plain_decoding_in_the_status_bar(where: str) -> None:
    engine = make_engine(default_k=0) if where == "pair" else make_engine()  # models.toml's k = 0
    app = create_app(engine, options=options(k=0) if where == "option" else options(k=None))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "t5")
        assert "spec OFF" in app.status.content.plain and "K=0" not in app.status.content.plain
        assert not app.last_stats.speculative


@pytest.mark.parametrize("where", ["option", "pair"])
async def test_ctrl_t_under_k_0_says_why_it_stays_plain(where: str) -> None:
    engine = make_engine(default_k=0) if where == "pair" else make_engine()  # models.toml's k = 0
    app = create_app(engine, options=options(k=0) if where == "option" else options(k=None))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert any("K = 0 (--k 0, or the pair's k) decodes plainly" in n.message for n in app._notifications)
        await send(pilot, app, "t5")
        assert not app.last_stats.speculative and "spec OFF" in app.status.content.plain


async def test_toggle_speculation_without_a_draft_or_lookup_says_so() -> None:
    app = create_app(make_engine(draft=False, lookup=False), options=options())
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        assert app.speculative is False
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert app.speculative is False
        assert any("no draft" in n.message for n in app._notifications)
        assert "spec n/a" in app.status.content.plain


async def test_without_a_draft_model_lookup_speculates_and_is_coloured_apart() -> None:
    app = create_app(make_engine(draft=False), options=options(max_tokens=60))
    async with app.run_test(size=SIZE) as pilot:
        assert app.speculative is True and "lookup" in app.status.content.plain
        await send(pilot, app, "t5 t9 t13 t5 t9 t13 t5 t9")
        reply = app.messages("assistant")[0]
        assert {s.source for s in reply.segments} <= {"lookup", "target"}
        assert app.last_stats.speculative
        # apart in colour, not only in weight: the default theme's $accent was its $warning
        lookup, target = (reply.get_component_rich_style(f"message--{x}").color for x in ("lookup", "target"))
        assert lookup != target
        assert "draft: none (prompt lookup drafts)" in info_text(app.engine)


async def test_toggle_highlighting() -> None:
    app = create_app(make_engine(), options=options())
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "t5 t6")
        reply = app.messages("assistant")[0]
        assert body_spans(reply)
        await pilot.press("ctrl+g")
        assert app.highlight is False and reply.highlight is False
        assert body_spans(reply) == []
        assert "highlight off" in app.status.content.plain
        await pilot.press("ctrl+g")
        assert body_spans(reply)


async def test_temperature_keys() -> None:
    engine = make_engine()
    seen: list[float] = []
    real = engine.stream

    def spy(prompt, **kw):
        seen.append(kw["temperature"])
        return real(prompt, **kw)

    engine.stream = spy  # type: ignore[method-assign]
    app = create_app(engine, options=options())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+up")
        assert app.temperature == pytest.approx(0.9)
        await send(pilot, app, "t5")
        for _ in range(12):
            await pilot.press("ctrl+down")
        assert app.temperature == 0.0
        assert "T=0.00" in app.status.content.plain
        await send(pilot, app, "t6")
        assert seen == [pytest.approx(0.9), 0.0]


async def test_sigterm_quits_as_ctrl_q_does(tmp_path: Path) -> None:
    def embedders(sig: int, frame: object) -> None:  # what was there before the app: given back after
        pass

    signal.signal(signal.SIGTERM, embedders)
    app = create_app(slow_engine(), options=options(max_tokens=2000, chats_dir=tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await _mid_reply(app, pilot)
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, embedders)  # the app's: the kill reaches it
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):
            await asyncio.sleep(0.05)
            if app.return_code is not None:
                break
    assert app.return_code == 143
    (saved,) = list_chats(tmp_path)  # the reply so far, kept as ctrl+q keeps it
    assert [m["role"] for m in saved.messages] == ["user", "assistant"] and saved.messages[1]["content"]
    assert signal.getsignal(signal.SIGTERM) is embedders  # given back when the app is gone
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


async def test_ctrl_q_quits_mid_generation() -> None:
    engine = slow_engine()
    app = create_app(engine, options=options(max_tokens=2000))
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#prompt").value = "t5"
        await pilot.press("enter")
        await asyncio.sleep(0.1)
        await pilot.press("ctrl+q")
    assert app.return_code in (0, None)
    for _ in range(100):
        if not engine.busy:
            break
        time.sleep(0.01)
    assert not engine.busy


# -- errors, warnings, info, save ------------------------------------------------------------------


async def test_context_full_shows_in_the_chat_and_keeps_the_conversation() -> None:
    app = create_app(make_engine(n_ctx=40), options=options(max_tokens=100))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "t5 t6")
        assert app.last_reason == "length"
        assert "context is full" in app.messages("assistant")[0].meta
        kept = list(app.history)
        await send(pilot, app, "t7 t8")
        errors = app.messages("error")
        assert len(errors) == 1 and "context" in errors[0].text
        assert app.history == kept  # the earlier turns are still there
        assert len(app.messages("assistant")) == 1
        assert app.query_one("#prompt").value == "t7 t8"  # the message is back in the box to retry
        assert [v.text for v in app.messages("user")] == ["t5 t6"]  # its bubble went: a retry shows it once
        assert not app.generating


async def test_a_stop_before_the_first_token_takes_no_turn() -> None:
    target = GatedModel(n_ctx=4096)
    gate = target.gate  # the target's evals wait for it: the prefill is still running at Esc
    engine = Engine(target, FakeModel(noise=0.5, n_ctx=4096), name="gated")  # type: ignore[arg-type]
    app = create_app(engine, options=options(max_tokens=200))
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#prompt").value = "t5 t6"
        await pilot.press("enter")
        await pilot.press("escape")
        gate.set()
        await settle(pilot, app)
        assert app.last_reason == "cancelled" and app.history == []
        assert app.messages("user") == [] and app.messages("assistant") == []
        assert app.query_one("#prompt").value == "t5 t6"  # back in the box, to send again
        gate.clear()
        app.query_one("#prompt").value = "t7 t8"  # (its prefill evaluates t7: it waits at the gate)
        await pilot.press("enter")
        app.query_one("#prompt").value = "t9"  # typed while the prefill runs: nothing may be lost
        await pilot.press("escape")
        gate.set()
        await settle(pilot, app)
        assert [m["content"] for m in app.history] == ["t7 t8", ""] and app.query_one("#prompt").value == "t9"


async def test_a_paste_of_several_lines_is_sent_whole() -> None:
    app = create_app(make_engine(), options=options(max_tokens=4))
    async with app.run_test(size=SIZE) as pilot:
        prompt = app.query_one("#prompt")
        prompt.value = "explain: "
        prompt.cursor_position = len(prompt.value)
        prompt.post_message(events.Paste("t5 t6\r\n    t7\nt8"))
        await pilot.pause()
        assert prompt.value == "explain: [pasted 3 lines #1]"
        prompt.post_message(events.Paste("\none line\n"))  # a single line goes in as it is
        await pilot.pause()
        await pilot.press("enter")
        await settle(pilot, app)
        assert app.history[0]["content"] == "explain: t5 t6\n    t7\nt8one line"
        assert prompt.value == "" and prompt.pasted == {}


async def test_a_paste_marker_edited_in_part_is_not_sent_half_known() -> None:
    app = create_app(make_engine(), options=options(max_tokens=4))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        prompt = app.query_one("#prompt")
        prompt.post_message(events.Paste("t5\nt6"))
        await pilot.pause()
        await pilot.press("backspace", "enter")
        await settle(pilot, app)
        assert app.history == [] and prompt.value == "[pasted 2 lines #1"
        assert any("marker was edited" in n.message for n in app._notifications)


async def test_an_unknown_command_stays_to_be_corrected_and_a_double_slash_sends_it() -> None:
    app = create_app(make_engine(), options=options(max_tokens=4))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "/usr/bin/env: what does it do?")
        assert "unknown command /usr/bin/env:" in app.messages("error")[0].text and app.history == []
        assert app.query_one("#prompt").value == "/usr/bin/env: what does it do?"
        await send(pilot, app, "//usr/bin/env: what does it do?")
        assert app.history[0]["content"] == "/usr/bin/env: what does it do?"
        prompt = app.query_one("#prompt")
        prompt.post_message(events.Paste("/var/log/syslog says:\nt5"))  # a pasted / is no command
        await pilot.pause()
        await pilot.press("enter")
        await settle(pilot, app)
        assert app.history[2]["content"] == "/var/log/syslog says:\nt5"


async def test_a_message_handed_back_keeps_its_double_slash() -> None:
    app = create_app(make_engine(n_ctx=16), options=options(max_tokens=100))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "//t5 t6 t7 t8 t9 t10 t11 t12 t13 t14 t15 t16 t17 t18 t19 t20 t21 t22 t23 t24 t25 t26")
        assert app.messages("error") and app.history == []
        assert app.query_one("#prompt").value.startswith("//t5 t6")  # Enter sends it again, not a command


async def test_a_message_of_several_lines_handed_back_keeps_its_one_slash() -> None:
    app = create_app(make_engine(n_ctx=16), options=options(max_tokens=100))
    async with app.run_test(size=SIZE) as pilot:
        prompt = app.query_one("#prompt")
        message = "/var/log/syslog says:\n" + " ".join(f"t{i}" for i in range(5, 30))
        prompt.post_message(events.Paste(message))
        await pilot.pause()
        for _ in range(2):  # too long for the context: it comes back, and comes back again
            await pilot.press("enter")
            await settle(pilot, app)
            assert app.history == [] and prompt.value == "[pasted 2 lines #1]" and prompt.text() == message


async def test_an_error_before_the_first_token_with_new_text_typed_keeps_the_message() -> None:
    target = GatedModel(n_ctx=4096)
    gate = target.gate  # the prefill waits for it: the user types while it runs
    target.fail_at_eval = 0
    engine = Engine(target, FakeModel(noise=0.5, n_ctx=4096), name="gated")  # type: ignore[arg-type]
    app = create_app(engine, options=options(max_tokens=8))
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#prompt").value = "t5 t6"
        await pilot.press("enter")
        app.query_one("#prompt").value = "t9"  # typed while the prefill runs
        gate.set()
        await settle(pilot, app)
        assert app.messages("error") and app.query_one("#prompt").value == "t9"
        # the message the user still sees is part of the chat (no reply), not a bubble the model never saw
        assert [m["content"] for m in app.history] == ["t5 t6", ""]
        assert [m.text for m in app.messages("user")] == ["t5 t6"] and app.messages("assistant")[0].meta == "[error]"


async def test_tab_keeps_typing_in_the_prompt() -> None:
    app = create_app(make_engine(), options=options(max_tokens=4))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("tab", "t", "5", "enter")
        await settle(pilot, app)
        assert app.history and app.history[0]["content"] == "t5"


async def test_an_unexpected_failure_is_a_chat_message_too() -> None:
    engine = make_engine()
    engine.target.fail_at_eval = 1  # type: ignore[attr-defined]
    app = create_app(engine, options=options())
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "t5 t6")
        assert app.messages("error") and "injected failure" in app.messages("error")[0].text
        assert not app.generating


async def test_warnings_appear_in_the_ui() -> None:
    app = create_app(make_engine(warnings=["the draft is Q2_K under an F16 target"]), options=options())
    async with app.run_test(size=SIZE):
        box = app.query_one("#warnings")
        assert box.display and "Q2_K" in str(box.content)


INFO = EngineInfo(
    target={"architecture": "llama", "name": "Big", "quantization": "F32", "file_size": 540_000_000},
    draft={"architecture": "llama", "name": "Small", "quantization": "Q4_1"},
    pair=PairVerdict(True, (), ("draft is much lower-bit",)),
    gpu=GpuOffload(supported=True, target_layers=30, draft_layers=0),
    n_ctx=512,
    threads=2,
)


async def test_model_info_screen() -> None:
    app = create_app(make_engine(info=INFO), options=options())
    async with app.run_test(size=SIZE) as pilot:
        assert "GPU: target 30 layers, draft CPU" in app.status.content.plain
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, InfoScreen)
        text = str(app.screen.query_one("#info-text").content)
        for part in (
            "target:",
            "Big",
            "Q4_1",
            "pair: compatible",
            "draft is much lower-bit",
            "515 MB",
        ):
            assert part in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, InfoScreen)


async def test_save_writes_markdown(tmp_path: Path) -> None:
    app = create_app(make_engine(), options=options(save_dir=tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "/save early.md")
        assert "nothing to save" in app.messages("error")[0].text
        await send(pilot, app, "t5 t6")
        await send(pilot, app, "/save out/chat.md")
        text = (tmp_path / "out" / "chat.md").read_text()
        assert "## You\n\nt5 t6\n" in text
        assert f"## Assistant\n\n{app.history[1]['content'].rstrip()}\n" in text
        assert "saved 2 messages" in app.messages("note")[-1].text
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert len(list(tmp_path.glob("edgespec-chat-*.md"))) == 1
        (tmp_path / "file").write_text("")
        await send(pilot, app, "/save file/x.md")
        assert "could not save" in app.messages("error")[-1].text
        await send(pilot, app, "/nope")
        assert "unknown command /nope" in app.messages("error")[-1].text


async def test_enter_while_generating_does_not_send() -> None:
    # a reply far longer than the test (60 tokens once finished before the second Enter in a
    # loaded CI run), stopped with Esc once the second Enter was refused
    app = create_app(slow_engine(), options=options(max_tokens=2000))
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#prompt").value = "t5"
        await pilot.press("enter")
        assert app.generating
        app.query_one("#prompt").value = "t6"
        await pilot.press("enter")
        assert app.generating and app.query_one("#prompt").value == "t6"
        await pilot.press("escape")
        await settle(pilot, app)
        assert app.last_reason == "cancelled"
        assert [m["content"] for m in app.history if m["role"] == "user"] == ["t5"]


# -- the CLI and the pure helpers ---------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="edgespec")
    add_parser(p.add_subparsers(dest="command"))
    return p


def test_chat_subcommand_takes_run_options() -> None:
    args = parser().parse_args(
        [
            "chat",
            "--pair",
            "demo",
            "--temperature",
            "0.3",
            "--k",
            "3",
            "--no-spec",
            "--max-tokens",
            "99",
            "--seed",
            "7",
        ]
    )
    opts = ChatOptions.from_args(args)
    assert (opts.temperature, opts.k, opts.speculative, opts.max_tokens, opts.seed) == (
        0.3,
        3,
        False,
        99,
        7,
    )
    assert args.pair == "demo" and callable(args.func)


def test_a_chat_reply_runs_to_its_end_unless_max_tokens_says_less_and_help_says_so() -> None:
    assert ChatOptions.from_args(parser().parse_args(["chat"])).max_tokens is None
    chat = add_parser(argparse.ArgumentParser().add_subparsers())
    help_text = " ".join(chat.format_help().split())
    assert "until the answer or the context ends" in help_text and "default None" not in help_text


def test_chat_load_errors_propagate_as_edgespec_errors() -> None:
    args = parser().parse_args(["chat", "--draft", "x.gguf"])
    with pytest.raises(EdgespecError, match="--draft needs --target"):
        args.func(args)


def test_visible_replaces_control_characters() -> None:
    assert visible("a\x1b[31mb\tc\nd\x07\x7f\x9b") == "a␛[31mb\tc\nd␇␡\ufffd"


def test_stats_line_without_timings_and_markdown() -> None:
    assert stats_line(None) == "no generation yet"
    md = to_markdown([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo\n"}], name="demo")
    assert md.startswith("# edgespec chat — demo") and "## You\n\nhi\n\n## Assistant\n\nyo\n" in md


async def test_a_widget_removed_from_the_screen_ignores_late_updates() -> None:
    # The process timer and a streaming reply can both reach a widget after it is unmounted
    # (a new chat, the app closing); its component styles are gone by then and drawing raises.
    app = create_app(make_engine(), options=options())
    async with app.run_test(size=SIZE) as pilot:
        view = app.add_message("assistant", "hello")
        await pilot.pause()
        status = app.status
        await view.remove()
        await status.remove()
        view.append([])
        view.set_meta("late")
        status.set(rss=1e6, cpu=1.0)
        app.read_sys()


async def test_the_status_bars_settings_line_shows_at_any_width() -> None:
    # at 120 columns with both sources' counts the stats line wrapped, and its second row
    # pushed the settings line (spec on/off, temperature, colours) out of the 2-row bar
    from textual.geometry import Region

    app = create_app(make_engine(), options=options(max_tokens=40))
    async with app.run_test(size=(60, 30)) as pilot:
        await send(pilot, app, "t5 t9 t13 t5 t9 t13 t5 t9")
        bar = app.status
        rows = ["".join(seg.text for seg in strip) for strip in bar.render_lines(Region(0, 0, bar.size.width, 2))]
        assert "T=0.80" in rows[1], rows
