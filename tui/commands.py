"""The chat's /commands and its Markdown save: a part of ChatApp (tui/app.py), kept apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .store import markdown_path, write_file
from .text import to_markdown


class Commands:
    """Mixed into ChatApp, whose history, options, engine, add_message, settings_text and
    actions these use."""

    history: list[dict[str, str]]
    options: Any
    engine: Any

    def command(self, text: str) -> bool:
        """Run a /command; False for an unknown one (//text sends a message that starts with /)."""
        name, _, arg = text.partition(" ")
        if name == "/save":
            self.save(arg.strip() or None)
        elif name == "/new":
            self.action_new_chat()
        elif name == "/info":
            self.action_info()
        else:
            self.add_message("error", f"unknown command {name}: try /save PATH, /new or /info, or //text to send it")
            return False
        return True

    def save(self, path: str | None = None) -> Path | None:
        target = markdown_path(path, self.options.save_dir)
        if not self.history:
            self.add_message("error", "nothing to save yet")
            return None
        try:
            write_file(target, to_markdown(self.history, name=self.engine.name, settings=self.settings_text()))
        except OSError as err:
            self.add_message("error", f"could not save to {target}: {err.strerror or err}")
            return None
        self.add_message("note", f"saved {len(self.history)} messages to {target}")
        return target
