"""The prompt: a one-line input that keeps a pasted block of lines whole.

Textual's `Input` keeps only the first line of a paste, and a user pasting code, a log
or a paragraph lost the rest without a word. Here a paste of several lines shows as a
marker, "[pasted 12 lines #1]", that can be typed around (a question before it, a
word after) and that `text()` replaces with what was pasted when the message is sent.
A turn handed back to the prompt (a failed send, a resumed chat's last message) goes
in the same way (`set_text`). A marker edited in part (a backspace into it) makes `text()`
None: the paste is not sent half-known.
"""

from __future__ import annotations

import re

from textual import events
from textual.widgets import Input

LEFT_OF_A_MARKER = re.compile(r"\[pasted \d|lines #\d")  # what a marker edited in part leaves


class PromptInput(Input):
    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.pasted: dict[str, str] = {}  # marker -> the text it stands for

    def _on_paste(self, event: events.Paste) -> None:
        text = event.text.replace("\r\n", "\n").replace("\r", "\n").strip("\n")
        event.prevent_default()  # Input's own handler inserts a paste's first line only
        marker = self._marker(text) if "\n" in text else text
        selection = self.selection
        if selection.is_empty:
            self.insert_text_at_cursor(marker)
        else:
            self.replace(marker, *selection)
        event.stop()

    def _marker(self, text: str) -> str:
        """A new marker standing for `text`."""
        marker = f"[pasted {text.count(chr(10)) + 1} lines #{len(self.pasted) + 1}]"
        self.pasted[marker] = text
        return marker

    def text(self) -> str | None:
        """What the prompt says, each paste marker replaced by what was pasted; None where a
        marker was edited in part."""
        out, rest = self.value, self.value
        for marker, pasted in self.pasted.items():
            out, rest = out.replace(marker, pasted), rest.replace(marker, "")
        return None if self.pasted and LEFT_OF_A_MARKER.search(rest) else out

    def set_text(self, message: str) -> None:
        """Put a message back as it would be typed (several lines become one marker; one line
        that starts with / gets its second /, as a marker never reads as a command), the cursor
        at its end."""
        self.pasted.clear()
        if "\n" in message:
            self.value = self._marker(message)
        else:
            self.value = "/" + message if message.startswith("/") else message
        self.cursor_position = len(self.value)

    def clear(self) -> None:
        self.pasted.clear()
        super().clear()
