"""The chat app. `create_app(engine, options=...)` is shared by `edgespec chat` and the tests.

Generation runs in a thread worker: it iterates `engine.stream(...)` and posts one
message per speculative step back to the UI thread, which appends the step's text
to the reply once (not per character). The conversation is a list of chat
messages; each turn resends it all, and the engine's prefix reuse prefills only
the new turn. With `options.chats_dir` set, it is saved as it goes (tui/store.py):
when a message is sent and when a reply ends, so a crash loses at most the reply
in progress; `options.resume` continues a saved chat.
"""

from __future__ import annotations

import signal
from typing import Any

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Header, Input, Static

from edgespec import EdgespecError, Generation

from . import messages
from .commands import Commands
from .options import ChatOptions, on_sigterm, psutil_reader
from .prompt import PromptInput
from .store import ChatFile
from .text import gpu_line, stats_line, visible
from .widgets import InfoScreen, MessageView, StatusBar

T_STEP, T_MAX = 0.1, 2.0
HELP = (
    "Enter sends · Esc stops · /save PATH writes Markdown · /new starts over · "
    "colours (ctrl+g): draft tokens the target accepted, and the target's own tokens"
)


class ChatApp(Commands, App[None]):
    CSS_PATH = "chat.tcss"
    TITLE = "edgespec chat"

    ENABLE_COMMAND_PALETTE = False  # the footer needs the room; every action has a key
    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+n", "new_chat", "New"),
        Binding("ctrl+t", "toggle_spec", "Spec"),
        Binding("ctrl+g", "toggle_highlight", "Colours"),
        Binding("ctrl+up", "temperature(1)", "T+", key_display="^↑"),
        Binding("ctrl+down", "temperature(-1)", "T-", key_display="^↓"),
        Binding("ctrl+o", "info", "Info"),
        Binding("ctrl+s", "save", "Save"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("pageup", "scroll(-1)", show=False),  # the chat scrolls while the prompt keeps the focus
        Binding("pagedown", "scroll(1)", show=False),
    ]

    Step, Finished, Failed = messages.Step, messages.Finished, messages.Failed  # from the generation thread

    def __init__(self, engine: Any, options: ChatOptions | None = None) -> None:
        super().__init__()
        self.engine = engine
        self.options = options or ChatOptions()
        self.speculative = self.options.speculative and engine.can_speculate
        self.temperature = self.options.temperature
        self.highlight = self.options.highlight
        self.history: list[dict[str, str]] = []
        self.generating = self._save_failed = False
        self.last_stats: Any = None
        self.last_reason: str | None = None
        self._reply_stream: Generation | None = None  # the reply in progress (its handle cancels it)
        self._reply: MessageView | None = None
        self._pending_user: dict[str, str] | None = None
        self._gen = self._shown_warnings = 0  # the reply in progress' number (a late message of another is dropped)
        self._sys_reader = self.options.sys_reader
        self._file: ChatFile | None = None
        self._unanswered = ""  # a resumed chat's last message, which got no reply
        self._unsent: dict[str, str] | None = None  # a message handed back to the prompt, not sent again yet
        if self.options.chats_dir is not None:
            self._file = ChatFile(self.options.chats_dir, self.options.resume, engine.name)
        if self.options.resume is not None:
            self.history = list(self.options.resume.messages)
            if self.history and self.history[-1]["role"] == "user":
                self._unsent = self.history.pop()
                self._unanswered = self._unsent["content"]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="warnings")
        yield VerticalScroll(id="chat")
        yield PromptInput(placeholder="Ask something (Enter sends, /save PATH, /new)", id="prompt")
        yield StatusBar(id="status")
        yield Footer()

    def on_mount(self) -> None:
        # held, not queried each time: timers and workers may run while another screen (model
        # info) is on top or the app is closing, and a query only searches the current screen
        self._status = self.query_one("#status", StatusBar)
        self._chat = self.query_one("#chat", VerticalScroll)
        self._prompt = self.query_one("#prompt", PromptInput)
        self._chat.can_focus = False  # typing always reaches the prompt (Tab had moved the focus to the chat)
        self._warnings = self.query_one("#warnings", Static)
        self.sub_title = visible(self.engine.name or "")
        self.status.set(
            has_draft=self.engine.has_draft,
            lookup=self.engine.lookup,
            speculative=self.speculative,
            k=self.options.k if self.options.k is not None else getattr(self.engine, "default_k", None),
            temperature=self.temperature,
            highlight=self.highlight,
            timings=self.options.timings,
            gpu=gpu_line(self.engine.info()),
        )
        self.show_warnings()
        if self._sys_reader is None:
            self._sys_reader = psutil_reader()
        self.read_sys()
        self.set_interval(self.options.refresh_s, self.read_sys)
        self._prompt.focus()
        on_sigterm(self._terminated)  # quits as ctrl+q does: the terminal is given back
        self.add_message("note", HELP)
        if self.options.resume is not None:
            for m in self.history:
                view = self.add_message(m["role"], m["content"])
                if m["role"] == "assistant" and not m["content"]:
                    view.set_meta("[no reply]")  # stopped or failed before its first token
            self.add_message("note", f"resumed chat {self.options.resume.id}")
            self._prompt.set_text(self._unanswered)  # it got no reply: Enter sends it again

    # -- helpers ------------------------------------------------------------------------
    @property
    def status(self) -> StatusBar:
        return self._status

    @property
    def chat(self) -> VerticalScroll:
        return self._chat

    def messages(self, role: str | None = None) -> list[MessageView]:
        return [m for m in self.query(MessageView) if role is None or m.role == role]

    def add_message(self, role: str, text: str = "") -> MessageView:
        view = MessageView(role, text, highlight=self.highlight)
        self.chat.mount(view)
        self.chat.scroll_end(animate=False)
        return view

    def show_warnings(self) -> None:
        box = self._warnings
        warnings = list(self.engine.warnings)
        box.update(visible("\n".join(f"⚠ {w}" for w in warnings)))
        box.display = bool(warnings)
        self._shown_warnings = len(warnings)

    def read_sys(self) -> None:
        try:
            rss, cpu = self._sys_reader() if self._sys_reader else (None, None)
        except Exception:  # a status reading must never break the chat
            rss, cpu = None, None
        self.status.set(rss=rss, cpu=cpu)

    def persist(self, messages: list[dict[str, str]]) -> None:
        """Save the conversation as it stands (the file is replaced whole, atomically), with a
        message handed back to the prompt as its last, unanswered one: `--resume` puts it back."""
        if self._file is None:
            return
        try:
            self._file.save([*messages, *([self._unsent] if self._unsent else [])])
        except OSError as err:
            if not self._save_failed:  # said once, not after every message
                self.add_message("error", f"could not save this chat to {self._file.path}: {err.strerror or err}")
            self._save_failed = True

    def settings_text(self) -> str:
        spec = "speculative" if self.speculative else "plain decoding"
        return f"{spec}, temperature {self.temperature:.2f}"

    # -- sending ------------------------------------------------------------------------
    @on(Input.Submitted, "#prompt")
    def submitted(self, event: Input.Submitted) -> None:
        typed, text = self._prompt.value.strip(), self._prompt.text()  # a command is what was typed
        if text is None:
            self.notify("a paste's marker was edited: delete it whole and paste again", severity="warning")
            return
        text = text.strip()
        if not text:
            return
        if typed.startswith("/") and not typed.startswith("//"):
            if self.command(typed):
                self._prompt.clear()  # an unknown command stays to be corrected
            return
        if self.generating:
            self.notify("still generating: Esc stops it", severity="warning")
            return
        self._prompt.clear()
        self.send(text[1:] if typed.startswith("//") else text)

    def send(self, text: str) -> None:
        self._unsent = None  # (what the box held is sent now, as it is)
        self.add_message("user", text)
        self._pending_user = {"role": "user", "content": text}
        self._reply = self.add_message("assistant")
        self._gen += 1
        self.generating = True
        self.status.set(generating=True)
        sampling = dict(self.options.sampling(), temperature=self.temperature)
        if sampling["max_tokens"] is None:
            sampling["max_tokens"] = self.engine.n_ctx  # to the end of the answer, or of the context
        messages = [*self.history, self._pending_user]
        self.persist(messages)
        try:
            # made here, not in the worker: Esc can cancel it from the first moment on
            self._reply_stream = self.engine.stream(messages, speculative=self.speculative, **sampling)
        except EdgespecError as err:
            self.post_message(self.Failed(self._gen, str(err)))
            return
        self.generate(self._gen, self._reply_stream)

    @work(thread=True, group="generate")
    def generate(self, gen: int, stream: Generation) -> None:
        try:
            event = None
            with stream:
                for event in stream:
                    segments = list(event.segments)
                    if segments or event.finish_reason is None:
                        self.post_message(self.Step(gen, segments, event.stats))
                    if event.finish_reason is not None:
                        self.post_message(self.Finished(gen, event.finish_reason, event.stats))
                        return
            self.post_message(self.Finished(gen, None, event.stats if event else None))
        except EdgespecError as err:
            self.post_message(self.Failed(gen, str(err)))
        except Exception as err:  # shown in the chat, the app keeps running
            self.post_message(self.Failed(gen, f"internal error ({type(err).__name__}): {err}"))

    def _cancel_reply(self) -> None:
        if self._reply_stream is not None:
            self._reply_stream.cancel()

    @on(Step)
    def step(self, message: Step) -> None:
        if message.gen != self._gen or self._reply is None:
            return
        follow = self.chat.scroll_y >= self.chat.max_scroll_y - 1  # the user did not scroll up
        if message.segments:
            self._reply.append(message.segments)
        self.last_stats = message.stats
        self.status.set(stats=message.stats)
        if follow:
            self.chat.scroll_end(animate=False)

    @on(Finished)
    def finished(self, message: Finished) -> None:
        if message.gen != self._gen or self._reply is None:
            return
        reply, self._reply = self._reply, None
        self.last_reason = message.reason
        if message.stats is not None:
            self.last_stats = message.stats
        notes = {"cancelled": "stopped", "length": self._length_note(message.stats)}
        meta = stats_line(message.stats, timings=self.options.timings) if message.stats else ""
        if message.reason in notes:
            meta = f"[{notes[message.reason]}] {meta}"
        if not (message.reason == "cancelled" and not reply.text and self._hand_back(reply)):
            reply.set_meta(meta)  # (stopped before its first token, the message went back: no turn)
            if self._pending_user is not None:
                self.history += [self._pending_user, {"role": "assistant", "content": reply.text}]
        self.persist(self.history)
        self._done(message.stats)

    def _length_note(self, stats: Any) -> str:
        if stats is not None and stats.n_prompt + stats.n_generated >= self.engine.n_ctx - 1:
            return "the context is full: ctrl+n starts a new chat"
        return f"max tokens ({self.options.max_tokens or self.engine.n_ctx})"

    @on(Failed)
    def failed(self, message: Failed) -> None:
        if message.gen != self._gen:
            return
        reply, self._reply = self._reply, None
        if reply is not None and self._pending_user is not None and (reply.text or not self._hand_back(reply)):
            # what was produced before the error is kept, like a cancel; with nothing produced and
            # new text in the box the message cannot go back, so it stays a turn (no reply)
            reply.set_meta("[error]")
            self.history += [self._pending_user, {"role": "assistant", "content": reply.text}]
        self.add_message("error", message.error)
        self.persist(self.history)
        self._done(None)

    def _hand_back(self, reply: MessageView) -> bool:
        """A turn not taken (an error, a stop before the first token): its message goes back into
        the empty prompt, to edit and send again, and its two bubbles go (a retry shows it once).
        False where the prompt holds new text: then nothing moves."""
        if self._prompt.value or self._pending_user is None:
            return False
        self._unsent = self._pending_user
        self._prompt.set_text(self._pending_user["content"])
        reply.remove()
        if mine := self.messages("user"):
            mine[-1].remove()
        return True

    def _done(self, stats: Any) -> None:
        self.generating = False
        self._reply_stream = None
        self._pending_user = None
        self.status.set(generating=False, **({"stats": stats} if stats is not None else {}))
        if len(self.engine.warnings) != self._shown_warnings:
            self.show_warnings()
        self.chat.scroll_end(animate=False)

    # -- actions ----------------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.generating:
            self._cancel_reply()

    def _cut_reply(self) -> None:
        """ctrl+n or ctrl+q during a reply: it stops, and what it said so far is kept and saved, as Esc keeps it."""
        if self.generating and (reply := self._reply) is not None and reply.text and self._pending_user is not None:
            reply.set_meta("[stopped]")
            self.history += [self._pending_user, {"role": "assistant", "content": reply.text}]
            self._pending_user = None  # taken: a late Finished adds nothing
            self.persist(self.history)
        self._cancel_reply()

    def action_new_chat(self) -> None:
        self._cut_reply()
        self._reply_stream = None
        self._gen += 1  # anything still arriving from the old generation is dropped
        self.generating = False
        self._reply = None
        self._pending_user = self._unsent = None
        self.history = []
        self.last_stats = None
        if self._file is not None:
            self._file = ChatFile(self._file.directory, model=self.engine.name)  # the old one stays saved
        self.chat.remove_children()
        self.status.set(generating=False, stats=None)
        self.add_message("note", "new chat")

    def action_toggle_spec(self) -> None:
        if not self.engine.can_speculate:
            self.notify("no draft model is loaded and lookup is off: plain decoding only", severity="warning")
            return
        if (self.options.k if self.options.k is not None else getattr(self.engine, "default_k", None)) == 0:
            self.notify("K = 0 (--k 0, or the pair's k) decodes plainly: start with another K", severity="warning")
            return
        self.speculative = not self.speculative
        self.status.set(speculative=self.speculative)
        self.notify(f"speculation {'on' if self.speculative else 'off'} from the next reply")

    def action_toggle_highlight(self) -> None:
        self.highlight = not self.highlight
        for view in self.messages("assistant"):
            view.set_highlight(self.highlight)
        self.status.set(highlight=self.highlight)

    def action_temperature(self, direction: int) -> None:
        t = round(min(T_MAX, max(0.0, self.temperature + direction * T_STEP)), 2)
        self.temperature = t
        self.status.set(temperature=t)

    def action_scroll(self, pages: int) -> None:
        self.chat.scroll_page_down() if pages > 0 else self.chat.scroll_page_up()

    def action_info(self) -> None:
        self.push_screen(InfoScreen(self.engine))

    def action_save(self) -> None:
        self.save(None)

    async def action_quit(self) -> None:
        self._cut_reply()
        self.exit()

    def _terminated(self) -> None:
        self._cut_reply()
        self.exit(return_code=128 + signal.SIGTERM)

    def on_unmount(self) -> None:
        on_sigterm(None)


def create_app(engine: Any, *, options: ChatOptions | None = None) -> ChatApp:
    """The chat app over a loaded engine (what `edgespec chat` runs and the tests drive)."""
    return ChatApp(engine, options)
