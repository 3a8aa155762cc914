"""The child side of an isolated engine: a process that loads the models and runs generations.

`main(conn, spec, log_level)` is the entry point the parent starts with the
"spawn" start method (edgespec.api.isolated). It builds an `Engine` from `spec`
(load arguments or an importable factory), says "ready" with the engine's facts,
then serves the parent over one duplex pipe until told to close or until the
parent goes away (the pipe ends: the child exits at once, so it never outlives
the app). Two threads: a reader that takes messages off the pipe (a cancel
takes effect at once, calls such as tokenize run beside the generation, as
in-process), and the main thread, which runs one generation at a time and
sends each of its events as it comes. Only picklable values cross: token ids,
events (text, segments, stats), facts, error class names and messages.

Messages, parent to child: ("run", gid, tokens, options), ("cancel", gid),
("call", cid, method, args, kwargs), ("close",). Child to parent: ("ready", facts),
("load_failed", error class, message), ("event", gid, StreamEvent),
("end", gid, warnings), ("error", gid, error class, message, warnings),
("reply", cid, ok, value), ("log", level, logger name, message).
"""

from __future__ import annotations

import importlib
import logging
import os
import queue
import signal
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ..core.errors import EdgespecError
from ..llama.loading import LoadOptions, load_pair
from .engine import Engine

log = logging.getLogger("edgespec.child")
CALLS = ("tokenize", "chat_text", "tools", "piece", "reset")  # what the parent may call by name
TERM_GRACE_S = 10.0  # after a SIGTERM, how long the parent has to close this process


@dataclass(frozen=True)
class ChildSpec:
    """How the child builds its engine: GGUF files and load options, or `factory`, an importable
    "module:function" returning an Engine (fakes in tests, custom backends), called with `kwargs`."""

    target: str | None = None
    draft: str | None = None
    options: LoadOptions = LoadOptions()
    factory: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    def build(self) -> Engine:
        if self.factory is not None:
            module, _, name = self.factory.partition(":")
            return getattr(importlib.import_module(module), name)(**self.kwargs)  # type: ignore[no-any-return]
        assert self.target is not None
        return Engine._from_loaded(load_pair(Path(self.target), self.draft, self.options))


class _Sender:
    """One pipe, written from several threads."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()

    def __call__(self, message: tuple) -> None:
        with self.lock:
            self.conn.send(message)


class _ForwardLogs(logging.Handler):
    """The child's log records go to the parent's logging (its stderr may be a chat screen)."""

    def __init__(self, send: _Sender) -> None:
        super().__init__()
        self.send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.send(("log", record.levelno, record.name, record.getMessage()))
        except Exception:  # the parent is gone: nothing to tell
            pass


def facts(engine: Engine) -> dict[str, Any]:
    return dict(
        name=engine.name,
        n_ctx=engine.n_ctx,
        n_vocab=engine.target.n_vocab,
        has_draft=engine.has_draft,
        lookup=engine.lookup,
        warnings=list(engine.warnings),
        info=engine.info(),
        default_k=engine.default_k,
        p_min=engine.p_min,
    )


def _exit_later(seconds: float) -> None:
    timer = threading.Timer(seconds, os._exit, (128 + signal.SIGTERM,))
    timer.daemon = True
    timer.start()


def main(conn: Connection, spec: ChildSpec, log_level: int = logging.WARNING, stderr: str | None = None) -> None:
    # Ctrl-C in a terminal, or SIGTERM to a service's whole process group (systemd's default),
    # reaches this process too: the parent decides what it means and closes this one. After a
    # SIGTERM it has TERM_GRACE_S to do so (a parent that ends without closing it waits for it)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: _exit_later(TERM_GRACE_S))
    if stderr is not None:  # what native code prints as it dies (ggml's assert) goes into the parent's one line
        fd = os.open(stderr, os.O_WRONLY | os.O_APPEND)
        os.dup2(fd, 2)
        os.close(fd)
    send = _Sender(conn)
    root = logging.getLogger()
    root.handlers[:] = [_ForwardLogs(send)]
    root.setLevel(log_level)
    try:
        engine = spec.build()
    except EdgespecError as err:
        send(("load_failed", type(err).__name__, str(err)))
        return
    except Exception as err:
        send(("load_failed", "EdgespecError", f"the engine failed to load ({type(err).__name__}: {err})"))
        return
    _Server(engine, send).serve(conn)


class _Server:
    def __init__(self, engine: Engine, send: _Sender) -> None:
        self.engine = engine
        self.send = send
        self.work: queue.Queue[tuple] = queue.Queue()
        self.lock = threading.Lock()
        self.running: dict[int, Any] = {}  # gid -> Generation
        self.cancelled: set[int] = set()  # cancels that came before their run

    def serve(self, conn: Connection) -> None:
        threading.Thread(target=self._read, args=(conn,), daemon=True, name="edgespec-child-read").start()
        self.send(("ready", facts(self.engine)))
        while True:
            message = self.work.get()
            if message[0] == "close":
                self.engine.close()
                return
            _, gid, tokens, options = message
            self._run(gid, tokens, options)

    def _read(self, conn: Connection) -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                os._exit(0)  # the parent is gone; nobody will read what we make
            kind = message[0]
            if kind == "cancel":
                with self.lock:
                    gen = self.running.get(message[1])
                    if gen is None:
                        self.cancelled.add(message[1])
                if gen is not None:
                    gen.cancel()
            elif kind == "call":
                threading.Thread(target=self._call, args=message[1:], daemon=True).start()
            else:
                self.work.put(message)

    def _run(self, gid: int, tokens: list[int], options: dict[str, Any]) -> None:
        try:
            gen = self.engine.stream(tokens, **options)
            with self.lock:
                self.running[gid] = gen
                if gid in self.cancelled:
                    self.cancelled.discard(gid)
                    gen.cancel()
            with gen:
                for event in gen:
                    self.send(("event", gid, event))
        except EdgespecError as err:
            self.send(("error", gid, type(err).__name__, str(err), list(self.engine.warnings)))
        except Exception as err:
            log.exception("generation failed")
            message = f"internal error in the engine ({type(err).__name__}: {err}); see the log"
            self.send(("error", gid, "EdgespecError", message, list(self.engine.warnings)))
        else:
            self.send(("end", gid, list(self.engine.warnings)))
        finally:
            with self.lock:
                self.running.pop(gid, None)

    def _call(self, cid: int, method: str, args: tuple, kwargs: dict[str, Any]) -> None:
        try:
            if method not in CALLS:
                raise EdgespecError(f"the engine has no method {method!r}")
            value = getattr(self.engine, method)(*args, **kwargs)
        except EdgespecError as err:
            self.send(("reply", cid, False, (type(err).__name__, str(err))))
        except Exception as err:
            log.exception("%s failed", method)
            self.send(("reply", cid, False, ("EdgespecError", f"internal error in the engine ({err})")))
        else:
            self.send(("reply", cid, True, value))
