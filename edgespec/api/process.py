"""The parent's side of one engine process: start it, talk to it, notice its death.

A `ChildProcess` starts `edgespec.api.child.main` with the "spawn" method and
reads its pipe on one thread, which hands each message to the request waiting
for it (a queue per generation or call), forwards the child's log records to
this process's logging, kills the child when a cancelled generation has not
ended within its grace period, and, when the child dies, gives every waiting
request a "crashed" message and tells its owner (`IsolatedEngine`), which
starts the next one. The child's stderr (fd 2: what native code prints as it dies) goes
to a file of its own, and its telling line (`last_words`) joins the death's one line
rather than landing on the user's terminal (a chat screen) before it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import signal
import tempfile
import threading
import time
import weakref
from multiprocessing import get_context
from multiprocessing.connection import wait
from typing import Any, Protocol

from ..core.errors import EngineCrashed
from . import child as child_side
from .child import ChildSpec

log = logging.getLogger("edgespec")
POLL_S = 0.1  # how often the reader looks at cancel deadlines
# a cancel's grace is at least this many of the slowest recent steps: a machine so loaded that a
# step takes seconds is slow, not hung (a 5 s grace killed and reloaded a child mid-step there)
SLOW_STEPS = 3


class Owner(Protocol):
    """What a child process reports to (IsolatedEngine)."""

    warnings: list[str]
    cancel_grace_s: float

    @property
    def retry_after(self) -> int: ...

    def child_died(self, child: ChildProcess, cause: str) -> None: ...


class ChildProcess:
    """One child process, and the thread that reads its pipe and notices its death."""

    def __init__(self, owner: Owner, spec: ChildSpec, log_level: int) -> None:
        ctx = get_context("spawn")
        self._owner = weakref.ref(owner)  # not kept alive by this thread: a dropped engine closes its child
        self.conn, theirs = ctx.Pipe()
        fd, self.stderr = tempfile.mkstemp(prefix="edgespec-engine-", suffix=".stderr")  # the child's native stderr
        os.close(fd)
        self.process = ctx.Process(
            target=child_side.main, args=(theirs, spec, log_level, self.stderr), name="edgespec-engine", daemon=True
        )
        self.process.start()
        theirs.close()  # only the child holds its end: its death ends the pipe
        self.ready = threading.Event()
        self.facts: dict[str, Any] = {}
        self.load_error: tuple[str, str] | None = None
        self.dead: str | None = None  # the message for callers, once it died
        self.cause = ""  # why it died: the signal or exit code
        self.killed_for: str | None = None
        self.closing = False
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._pending: dict[int, queue.Queue[tuple]] = {}
        self._deadlines: dict[int, tuple[float, float]] = {}  # cancelled generations: (must have ended by, grace)
        self._heard: dict[int, float | None] = {}  # when each generation last sent something (None: nothing yet)
        self._steps: collections.deque[float] = collections.deque(maxlen=16)  # recent gaps between its messages
        self._reader = threading.Thread(target=self._read, daemon=True, name="edgespec-engine-pipe")
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def _retry_after(self) -> int:
        owner = self._owner()
        return owner.retry_after if owner is not None else 1

    # -- talking to it -------------------------------------------------------------------
    def open(self, rid: int) -> queue.Queue[tuple]:
        with self._lock:
            if self.dead is not None:
                raise EngineCrashed(self.dead, self._retry_after())
            q: queue.Queue[tuple] = queue.Queue()
            self._pending[rid] = q
            self._heard[rid] = None  # its first message follows a prefill (or is a call's answer): not a step
            return q

    def forget(self, rid: int) -> None:
        with self._lock:
            self._pending.pop(rid, None)
            self._deadlines.pop(rid, None)
            self._heard.pop(rid, None)

    def send(self, message: tuple) -> None:
        try:
            with self._send_lock:
                self.conn.send(message)
        except (OSError, ValueError) as err:  # a dead child's pipe; its reader reports the death
            gone = self.dead or "the engine process is gone; retry in a few seconds"
            raise EngineCrashed(gone, self._retry_after()) from err

    def cancel(self, gid: int, grace_s: float, *, tell: bool = True) -> None:
        """Stop `gid`, and kill the child if it has not ended the stream `grace_s` from now (or
        SLOW_STEPS of the slowest recent steps, where those took longer)."""
        with self._lock:
            if gid not in self._pending or gid in self._deadlines:
                return
            grace = max(grace_s, SLOW_STEPS * max(self._steps, default=0.0))
            self._deadlines[gid] = (time.monotonic() + grace, grace)
        if tell:
            try:
                self.send(("cancel", gid))
            except EngineCrashed:
                pass

    def kill(self, reason: str) -> None:
        self.killed_for = self.killed_for or reason
        self.process.kill()

    def close(self) -> None:
        self.closing = True
        try:
            self.send(("close",))
        except EngineCrashed:
            pass
        # the reader thread reaps the child (it waits on its sentinel); waiting here on the
        # process too would race it: the loser's waitpid finds no child and reads it as alive
        if threading.current_thread() is self._reader:  # closed from its own death notice
            self.process.join(10)
            return
        self._reader.join(10)
        if self._reader.is_alive():
            self.kill("closing")
            self._reader.join(5)

    # -- the reader thread -----------------------------------------------------------------
    def _read(self) -> None:
        sentinel = self.process.sentinel
        while True:
            ready = wait([self.conn, sentinel], timeout=POLL_S)
            self._check_deadlines()
            if self.conn in ready:
                try:
                    message = self.conn.recv()
                except (EOFError, OSError):
                    break
                except Exception:  # a message that does not unpickle: the protocol is broken
                    log.exception("unreadable message from the engine process")
                    self.kill("it sent a message that could not be read")
                    continue
                self._dispatch(message)
            elif sentinel in ready:
                break
        self.process.join(5)
        self.conn.close()  # here, not in close(): this thread may be waiting on it
        self._died()

    def _dispatch(self, message: tuple) -> None:
        kind = message[0]
        if kind == "log":
            logging.getLogger(message[2]).log(message[1], "%s", message[3])
        elif kind == "ready":
            self.facts = message[1]
            self.ready.set()
        elif kind == "load_failed":
            self.load_error = (message[1], message[2])
            self.ready.set()
        else:
            if kind in ("end", "error") and (owner := self._owner()) is not None:
                owner.warnings = list(message[-1])
            with self._lock:
                q = self._pending.get(message[1])
                if kind in ("end", "error"):
                    self._deadlines.pop(message[1], None)
                if message[1] in self._heard:
                    now = time.monotonic()
                    if (heard := self._heard[message[1]]) is not None:
                        self._steps.append(now - heard)
                    self._heard[message[1]] = now
            if q is not None:
                q.put(message)

    def _check_deadlines(self) -> None:
        with self._lock:
            late = [grace for t, grace in self._deadlines.values() if t <= time.monotonic()]
        if late and self.process.is_alive():
            self.kill(f"a generation did not stop within {max(late):.3g} s of being cancelled")

    def _died(self) -> None:
        code = self.process.exitcode
        if self.killed_for is not None:
            cause = f"killed because {self.killed_for}"
        elif code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            cause = f"killed by {name}" + (", perhaps for lack of memory" if name == "SIGKILL" else "")
        else:
            cause = f"exited with code {code}"
        said = last_words(self.stderr)
        with contextlib.suppress(OSError):
            os.unlink(self.stderr)
        if said and self.killed_for is None:
            cause += f": {said}"
        self.cause = cause
        with self._lock:
            self.dead = f"the engine process died ({cause}); it is restarting: retry in a few seconds"
            pending = list(self._pending.items())
            self._deadlines.clear()
        for rid, q in pending:
            q.put(("crashed", rid, self.dead))
        self.ready.set()
        if not self.closing and (owner := self._owner()) is not None:
            owner.child_died(self, cause)


def last_words(path: str, limit: int = 16384) -> str:
    """What the child printed as it died, as one line: the first line of its last `limit` bytes
    that names an assert, an abort or an error (ggml's `GGML_ASSERT(...) failed`, before the
    backtrace it prints), else its last line; "" for none."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
            lines = [" ".join(x.split()) for x in f.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return ""
    lines = [x for x in lines if x]
    telling = [x for x in lines if any(w in x.lower() for w in ("assert", "abort", "error", "terminate", "fatal"))]
    return (telling[:1] or lines[-1:] or [""])[0][:200]
