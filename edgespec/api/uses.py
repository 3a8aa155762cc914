"""Native reads beside a generation (tokenize, piece, a request's preparation): any number at
once, and `Engine.close()` frees the models only once those under way have ended (freed under
a tokenize, llama.cpp read freed memory: a segfault). A server tokenizes a slow prompt while
other requests go ahead, so the reads do not wait for one another, only for a close: once it
has begun, a thread's first read waits for it (reads that kept overlapping held it off for good),
and its nested reads (stream's preparation tokenizes) go on, so a close never waits on itself."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class Uses:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._n = 0
        self._closing = False
        self._mine = threading.local()  # this thread's reads under way (nested ones go on)

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        """One read: a thread's first waits while a close is under way."""
        depth = getattr(self._mine, "depth", 0)
        with self._cond:
            if not depth:
                self._cond.wait_for(lambda: not self._closing)
            self._n += 1
        self._mine.depth = depth + 1
        try:
            yield
        finally:
            self._mine.depth = depth
            with self._cond:
                self._n -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """For close: once no read is under way, and no new one starts until it is done."""
        with self._cond:
            self._closing = True
            try:
                self._cond.wait_for(lambda: self._n == 0)
                yield
            finally:
                self._closing = False
                self._cond.notify_all()
