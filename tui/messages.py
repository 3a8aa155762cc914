"""What the generation thread posts to the chat app: a step's text, the end, a failure.

Each carries the number of the reply it belongs to (`gen`): a late message from a reply
the user has already left (a new chat, a stop) is dropped by the app.
"""

from __future__ import annotations

from typing import Any

from textual.message import Message

from edgespec import Segment


class Step(Message):
    def __init__(self, gen: int, segments: list[Segment], stats: Any) -> None:
        super().__init__()
        self.gen, self.segments, self.stats = gen, segments, stats


class Finished(Message):
    def __init__(self, gen: int, reason: str | None, stats: Any) -> None:
        super().__init__()
        self.gen, self.reason, self.stats = gen, reason, stats


class Failed(Message):
    def __init__(self, gen: int, error: str) -> None:
        super().__init__()
        self.gen, self.error = gen, error
