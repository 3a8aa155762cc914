"""A second Ctrl-C that quits while native code holds the main thread.

Python raises KeyboardInterrupt only when the main thread is back in Python. A llama.cpp
call waiting on an RPC server that froze (a host suspended, a cable pulled: no reset ever
comes) never returns, so `edgespec run` went on waiting whatever the user pressed. The C
signal handler still writes each signal to `signal.set_wakeup_fd`'s pipe, from any
thread: a watcher reads it there. A first Ctrl-C is left to Python as before (the answer
so far stays, "edgespec: interrupted"); if it has not ended the command within
`NOTICE_S`, the watcher says so, and a second one ends the process at once with 130.

Not for commands with an event loop of their own (serve, chat): asyncio takes the wakeup
fd for its signal handlers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

NOTICE_S = 2.0  # a first Ctrl-C not honoured this long is said to be waiting on native code


@contextlib.contextmanager
def quit_on_second_interrupt() -> Iterator[bool]:
    """While the block runs (in the main thread), a watcher reads the signals; whether it does.
    Afterwards the wakeup fd is the one before, and the watcher ends (a test runner that ran
    the command in its own process sends its own Ctrl-Cs later)."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    read, write = os.pipe()
    os.set_blocking(write, False)  # the C handler must never block on a full pipe
    try:
        before = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:  # not the main thread of the main interpreter
        os.close(read)
        os.close(write)
        yield False
        return
    watcher = _Watcher(read)
    watcher.start()
    try:
        yield True
    finally:
        signal.set_wakeup_fd(before)
        watcher.stop()
        os.close(write)  # the watcher's read then ends


class _Watcher(threading.Thread):
    def __init__(self, read: int) -> None:
        super().__init__(name="edgespec-interrupt", daemon=True)
        self.read, self.pressed, self.stopped = read, 0, False
        self.notice: threading.Timer | None = None

    def run(self) -> None:
        try:
            while data := os.read(self.read, 64):
                if not self.stopped and signal.SIGINT in data:
                    self._pressed()
        finally:
            os.close(self.read)

    def stop(self) -> None:
        self.stopped = True
        if self.notice is not None:
            self.notice.cancel()

    def _pressed(self) -> None:
        self.pressed += 1
        if self.pressed == 1:
            self.notice = threading.Timer(NOTICE_S, _say, ("still waiting for llama.cpp; press Ctrl-C again to quit",))
            self.notice.daemon = True
            self.notice.start()
        else:
            _say("interrupted while llama.cpp was still running (an RPC server that stopped answering?)")
            os._exit(130)


def _say(line: str) -> None:
    try:
        sys.stderr.write(f"\nedgespec: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed under us: the exit code still tells
        pass
