"""A handle per generation: an iterator of stream events that can be cancelled by itself.

`Engine.stream(...)` returns a `Generation`. Iterating it runs the decoder one
step per event under the engine's lock; `cancel()` (thread-safe, any time,
even before the first event) ends it at the end of the step in flight with
finish_reason "cancelled". The flag belongs to this generation only, so a
cancel meant for one request can never stop the next one. `close()` (or
leaving a `with` block) releases the engine at once, restoring its caches; so
does dropping the handle unfinished (a `break` out of a `for` loop over it): the
events it runs refer to it weakly, so nothing but the caller keeps it alive and
it is closed as soon as the caller lets go of it. One kept in a variable holds the engine
until it is exhausted or closed: another call waits for it (it may be read on in another thread).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator

from ..core.events import StreamEvent


class Generation(Iterator[StreamEvent]):
    def __init__(self, run: Callable[[Generation], Iterator[StreamEvent]]) -> None:
        self.cancelled = threading.Event()
        self._events = run(weakref.proxy(self))  # no cycle: dropped, the handle frees its events at once

    def cancel(self) -> None:
        """Stop at the end of the current step (or before the first one)."""
        self.cancelled.set()

    def __iter__(self) -> Generation:
        return self

    def __next__(self) -> StreamEvent:
        return next(self._events)

    def close(self) -> None:
        close = getattr(self._events, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Generation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
