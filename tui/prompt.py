"""The prompt: a one-line input that keeps a pasted block of lines whole.

Textual's `Input` keeps only the first line of a paste, and a user pasting code, a log
or a paragraph lost the rest without a word. Here a paste of several lines shows as a
marker, "[pasted 12 lines #1]", that can be typed around (a question before it, a
word after) and that `text()` replaces with what was pasted when the message is sent.
A turn handed back to the prompt (a failed send, a resumed chat's last message) goes
in the same way (`set_text`).
"""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class PromptInput(Input):
    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.pasted: dict[str, str] = {}  # marker -> the text it stands for

    def _on_paste(self, event: events.Paste) -> None:
        text = event.text.replace("\r\n", "\n").replace("\r", "\n")
        if "\n" not in text.strip("\n"):
            return  # one line: Input's own handler (called after this one) inserts it
        event.prevent_default()  # Input's handler would insert its first line too
        marker = self._marker(text)
        selection = self.selection
        if selection.is_empty:
            self.insert_text_at_cursor(marker)
        else:
            self.replace(marker, *selection)
        event.stop()

    def _marker(self, text: str) -> str:
        marker = f"[pasted {text.count(chr(10)) + 1} lines #{len(self.pasted) + 1}]"
        self.pasted[marker] = text
        return marker

    def text(self) -> str:
        """What the prompt says, each paste marker replaced by what was pasted."""
        out = self.value
        for marker, pasted in self.pasted.items():
            out = out.replace(marker, pasted)
        return out

    def set_text(self, text: str) -> None:
        """Put a message back (several lines become one marker), the cursor at its end."""
        self.pasted.clear()
        self.value = self._marker(text) if "\n" in text else text
        self.cursor_position = len(self.value)

    def clear(self) -> None:
        self.pasted.clear()
        super().clear()
