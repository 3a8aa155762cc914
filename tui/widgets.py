"""Small widgets: one chat message, the status bar, the model-info screen."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from edgespec import Segment

from .text import fmt_bytes, fmt_num, info_text, stats_line, visible

ROLE_TITLES = {"user": "You", "assistant": "Model", "error": "Error", "note": "edgespec"}


class MessageView(Static):
    """One message. Model text is rendered as a plain Text: never markup, never escape codes."""

    COMPONENT_CLASSES = {"message--draft", "message--lookup", "message--target", "message--meta"}

    def __init__(self, role: str, text: str = "", *, highlight: bool = True) -> None:
        super().__init__(classes=role)
        self.role = role
        self.segments: list[Segment] = [Segment(text, "target")] if text else []
        self.meta = ""
        self.highlight = highlight
        self.border_title = ROLE_TITLES.get(role, role)

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments)

    _ready = False

    def on_mount(self) -> None:
        self._ready = True
        self.render_text()

    def on_unmount(self) -> None:
        self._ready = False  # its component styles are gone: a late token must not draw

    def append(self, segments: list[Segment]) -> None:
        self.segments.extend(segments)
        self.render_text()

    def set_meta(self, meta: str) -> None:
        self.meta = meta
        self.render_text()

    def set_highlight(self, on: bool) -> None:
        self.highlight = on
        self.render_text()

    def render_text(self) -> None:
        if not self._ready:
            return
        out = Text()
        meta_style = self.get_component_rich_style("message--meta")
        if self.role == "assistant" and self.highlight:
            styles = {
                source: self.get_component_rich_style(f"message--{source}") for source in ("draft", "lookup", "target")
            }
            for s in self.segments:
                out.append(visible(s.text), styles.get(s.source, styles["target"]))
        else:
            out.append(visible(self.text))
        if self.role == "assistant" and not self.segments and not self.meta:
            out.append("…", meta_style)
        if self.meta:
            out.append(("\n" if self.segments else "") + self.meta, meta_style)
        self.update(out)


class StatusBar(Static):
    """Two lines: the last step's speculation stats, then settings, process and GPU."""

    COMPONENT_CLASSES = {"status--draft", "status--lookup", "status--target", "status--dim"}

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.stats: Any = None
        self.generating = False
        self.speculative = True
        self.has_draft = True
        self.lookup = False
        self.k: int | None = None
        self.temperature = 0.8
        self.highlight = True
        self.rss: float | None = None
        self.cpu: float | None = None
        self.gpu = "GPU —"
        self.timings = True

    _ready = False

    def on_mount(self) -> None:
        self._ready = True
        self.render_status()

    def on_unmount(self) -> None:
        self._ready = False  # its component styles are gone: the process timer may still fire

    def set(self, **fields: Any) -> None:
        for key, value in fields.items():
            setattr(self, key, value)
        self.render_status()

    def render_status(self) -> None:
        if not self._ready:
            return
        dim = self.get_component_rich_style("status--dim")
        out = Text()
        out.append("● generating  " if self.generating else "○ idle  ", dim)
        out.append(stats_line(self.stats, timings=self.timings))
        out.append("\n")
        if not self.has_draft and not self.lookup:
            spec = "spec n/a (no draft, lookup off)"
        else:
            on = self.speculative and self.k != 0  # --k 0 decodes plainly
            spec = f"spec {'ON' if on else 'OFF'}" + (f" K={'auto' if self.k is None else self.k}" if on else "")
        out.append(f"{spec} · T={self.temperature:.2f} · ")
        if self.highlight:
            if self.has_draft:
                out.append("draft", self.get_component_rich_style("status--draft"))
                out.append("/")
            if self.lookup:
                out.append("lookup", self.get_component_rich_style("status--lookup"))
                out.append("/")
            out.append("target", self.get_component_rich_style("status--target"))
        else:
            out.append("highlight off")
        out.append(f" · mem {fmt_bytes(self.rss)} · CPU {fmt_num(self.cpu, '.0f', '%')} · {self.gpu}")
        self.update(out)


class InfoScreen(ModalScreen[None]):
    """Both models' facts (as `edgespec inspect` prints them) and the pair verdict."""

    BINDINGS = [
        Binding("escape,ctrl+o,q", "app.pop_screen", "Close"),
    ]

    def __init__(self, engine: Any) -> None:
        super().__init__()
        self.engine = engine

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="info-box") as box:
            box.border_title = "Model info"
            box.border_subtitle = "Esc closes"
            yield Static(Text(info_text(self.engine)), id="info-text")
