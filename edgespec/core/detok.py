"""Incremental detokenization and stop strings: token ids in, safe text out.

Text is released only when it is whole: never half a UTF-8 character (an
incremental decoder holds incomplete bytes), and never a piece of text that
might still turn into a stop string (the longest suffix that is a prefix of
some stop string is held back until it cannot). Each released piece of text is
also split into segments by where its tokens came from (an accepted draft
token, or the target's own), computed here once for every frontend. The
decoder knows nothing of text; this is where text lives.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence

from .events import Segment


class TextAssembler:
    def __init__(self, piece: Callable[[int], bytes], stop: Sequence[str] = ()) -> None:
        self._piece = piece
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = [s for s in stop if s]
        self._longest = max((len(s) for s in self._stops), default=0)
        self.text = ""  # everything decoded so far (up to a stop string, if one was found)
        self._released = 0
        # (offset in text, source) where each run of same-source text starts; a character
        # belongs to the token whose bytes completed it
        self._runs: list[tuple[int, str]] = []

    def feed(self, tokens: Sequence[int], sources: Sequence[str] = ()) -> tuple[list[Segment], int | None]:
        """Add tokens (`sources[i]` says where tokens[i] came from, "target" if not given);
        return (segments of text now safe to show, index in `tokens` where a stop string
        completed, or None). After a stop, the stop string and anything after it are dropped."""
        for i, token in enumerate(tokens):
            before = len(self.text)
            self.text += self._utf8.decode(self._piece(token))
            if len(self.text) > before:
                self._mark(before, sources[i] if i < len(sources) else "target")
            if self._stops and len(self.text) > before:
                cut = self._find_stop(before)
                if cut is not None:
                    self.text = self.text[:cut]
                    return self._release(len(self.text)), i
        return self._release(len(self.text) - self._held()), None

    def finish(self) -> list[Segment]:
        """Release whatever is still held (generation ended without a stop string)."""
        before = len(self.text)
        self.text += self._utf8.decode(b"", final=True)
        if len(self.text) > before:
            self._mark(before, self._runs[-1][1] if self._runs else "target")
        return self._release(len(self.text))

    def _mark(self, offset: int, source: str) -> None:
        if not self._runs or self._runs[-1][1] != source:
            self._runs.append((offset, source))

    def _find_stop(self, new_from: int) -> int | None:
        start = max(0, new_from - self._longest + 1)
        hits = [i for s in self._stops if (i := self.text.find(s, start)) >= 0]
        return min(hits) if hits else None

    def _held(self) -> int:
        tail = self.text[-self._longest :] if self._longest else ""
        for n in range(min(len(tail), self._longest - 1), 0, -1):
            if any(s.startswith(tail[-n:]) for s in self._stops):
                return n
        return 0

    def _release(self, upto: int) -> list[Segment]:
        start = self._released
        self._released = max(self._released, upto)
        out: list[Segment] = []
        for j, (run_start, source) in enumerate(self._runs):
            run_end = self._runs[j + 1][0] if j + 1 < len(self._runs) else len(self.text)
            lo, hi = max(run_start, start), min(run_end, upto)
            if lo < hi:
                out.append(Segment(self.text[lo:hi], source))
        # runs wholly released are not needed again (keep the one the next text continues)
        while len(self._runs) > 1 and self._runs[1][0] <= self._released:
            self._runs.pop(0)
        return out
