"""Native reads beside a generation (tokenize, piece, a request's preparation): any number at
once, and `Engine.close()` frees the models only once those under way have ended (freed under
a tokenize, llama.cpp read freed memory: a segfault). A server tokenizes a slow prompt while
other requests go ahead, so the reads do not wait for one another, only close waits for them."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class Uses:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._n = 0

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        """One read: it waits only while a close is freeing the models."""
        with self._cond:
            self._n += 1
        try:
            yield
        finally:
            with self._cond:
                self._n -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """For close: once no read is under way, and no new one starts until it is done."""
        with self._cond:
            self._cond.wait_for(lambda: self._n == 0)
            yield
