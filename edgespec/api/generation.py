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
`close()` from another thread while a read is under way (a Stop button beside a worker that
reads) cancels that read's step instead. Either way a stream read on after `close()` ends
with one last event, "cancelled", as a cancelled one does.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator

from ..core.events import Stats, StreamEvent


class Generation(Iterator[StreamEvent]):
    def __init__(self, run: Callable[[Generation], Iterator[StreamEvent]]) -> None:
        self.cancelled = threading.Event()
        self._reading = threading.Lock()  # held by a read under way: close() from elsewhere cancels it
        self._stats = Stats()  # the last event's
        self._done = False  # its last event is out (or waits in _ending)
        self._ending: StreamEvent | None = None  # the last event of a stream closed before its end
        self._events = run(weakref.proxy(self))  # no cycle: dropped, the handle frees its events at once

    def cancel(self) -> None:
        """Stop at the end of the current step (or before the first one)."""
        self.cancelled.set()

    def __iter__(self) -> Generation:
        return self

    def __next__(self) -> StreamEvent:
        with self._reading:
            if (ending := self._ending) is not None:
                self._ending = None
                return ending
            event = next(self._events)
            self._stats, self._done = event.stats, event.finish_reason is not None
            return event

    def close(self, wait_s: float = 0.0) -> None:
        """Release the engine at once; while another thread is reading, cancel that read instead
        (closing a generator under way would raise, in either thread): it ends at its step's end,
        or where it still waits for the engine, once it has the engine. With `wait_s` (a closing
        engine's), wait that long for the read to end and then close: a reader that stops
        reading after that step (a server shutting down) would leave the engine held."""
        if not self._reading.acquire(blocking=False):
            self.cancel()
            if wait_s <= 0 or not self._reading.acquire(timeout=wait_s):
                return
        try:
            close = getattr(self._events, "close", None)
            if close is not None:
                close()
            if not self._done:  # read on, it ends as a cancelled stream does
                self._ending, self._done = StreamEvent("", (), (), self._stats, "cancelled"), True
        finally:
            self._reading.release()

    def __enter__(self) -> Generation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def close_running(running: Generation | None, wait_s: float, undo: Callable[[], None]) -> None:
    """What a closing engine does to its stream still running (`close`), a weak proxy of its
    handle; `undo` runs where that raises (a Ctrl-C while it waits): the engine stays as it was."""
    try:
        with contextlib.suppress(ReferenceError):  # a handle dropped as this runs: its events end anyway
            if running is not None:
                running.close(wait_s)
    except BaseException:
        undo()
        raise
