"""An engine in a child process: the same API, and a crash of native code is not the app's.

`Engine.load(..., isolated=True)` / `Engine.from_pair(..., isolated=True)` return an
`IsolatedEngine`: both llama.cpp contexts and the decoder live in a "spawn" child (never fork
a process that holds llama.cpp state or threads) that loads the models from the same load
arguments (edgespec.api.child). Only events cross the pipe, a few hundred bytes a step.

When the child dies (a signal, an abort in native code, the out-of-memory killer), every
call waiting on it ends with `EngineCrashed` at once, the cause is logged, and a new child
reloads the models, a few attempts with growing pauses; meanwhile `state` is "restarting"
and new calls raise `EngineCrashed` (retry after `retry_after` seconds). Then it is "ok", or
"failed" when every attempt failed: a call RETRY_FAILED_S after that starts another round
(what failed may be back: an RPC server rebooted). A cancel the child does not honour within
`cancel_grace_s` (native code stuck in a long decode) kills it, which restarts the same way.
The child generates ahead of the consumer; the engine's lock is held until the stream ends.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import itertools
import logging
import math
import multiprocessing.util
import queue
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from weakref import WeakSet

from ..core import errors
from ..core.errors import EdgespecError, EngineCrashed
from ..core.events import Stats, StreamEvent
from ..core.info import EngineInfo
from ..core.penalties import make_penalties
from ..core.sampling import SamplingParams
from ..core.tools import ToolSet
from ..llama.loading import LoadOptions
from . import engine as _engine
from .checks import CLOSED, check_params, check_stop, check_structured_output
from .child import ChildSpec
from .engine import Engine, Prompt
from .generation import Generation, close_running
from .process import ChildProcess
from .prompts import check_prompt

__all__ = ["ChildSpec", "IsolatedEngine"]

log = logging.getLogger("edgespec")
CANCEL_GRACE_S = 5.0  # a cancel not honoured this long kills the child
RESTARTS = 5  # attempts to start a new child after a crash
RETRY_FAILED_S = 30.0  # a failed engine tries another round at a call this long after the last failed
BACKOFF_S = 1.0  # pause before the second attempt; doubles after each failure
CALL_TIMEOUT_S = 120.0  # tokenize and friends; a live child answers in milliseconds
_STREAM = inspect.signature(Engine.stream)


class IsolatedEngine(Engine):
    """An `Engine` whose models and decoder run in a child process (the module docstring), built by
    `Engine.load(..., isolated=True)`, `Engine.from_pair(...)` alike, or from a `ChildSpec` directly."""

    def __init__(
        self,
        spec: ChildSpec,
        *,
        cancel_grace_s: float = CANCEL_GRACE_S,
        restarts: int = RESTARTS,
        backoff_s: float = BACKOFF_S,
        retry_failed_s: float = RETRY_FAILED_S,
    ) -> None:
        # Engine.__init__ is not called: the models live in the child, and every public method
        # that would touch them is overridden here
        self._spec = spec
        self.cancel_grace_s = cancel_grace_s
        self._restarts = restarts
        self._backoff_s = backoff_s
        self._retry_failed_s, self._failed_at = retry_failed_s, 0.0
        self._revive = threading.Lock()  # one new round of restarts at a time
        self._lock = threading.Lock()
        self._running: Generation | None = None
        self._owner: int | None = None  # the thread that took the lock (for BusyError's words)
        self._closed = self._closing = False
        self._ids = itertools.count(1)
        self._state = "starting"
        self._failure = ""
        self._load_s = 1.0
        self.warnings: list[str] = []
        self._pieces: dict[int, bytes] = {}  # the vocabulary's text, as asked for (it never changes)
        self._current = _Current()
        self._child = self._start()
        self._state = "ok"
        _OPEN.add(self)
        # dropped unclosed, the engine closes its child (its pipe's reader holds it only weakly)
        self._finalizer = weakref.finalize(self, self._current.close)
        self._finalizer.atexit = False  # at exit, _close_open_engines (it cancels a stream first)

    @property
    def _child(self) -> ChildProcess:
        return self._current.child  # type: ignore[return-value]

    @_child.setter
    def _child(self, child: ChildProcess) -> None:
        self._current.child = child

    @classmethod
    def load(cls, target: str | Path, draft: str | Path | None = None, **options: Any) -> Engine:
        """`Engine.load(..., isolated=True)`."""
        return Engine.load(target, draft, **{**options, "isolated": True})

    @classmethod
    def from_pair(cls, name: str, config: str | Path | None = None, **options: Any) -> Engine:
        """`Engine.from_pair(..., isolated=True)`."""
        return Engine.from_pair(name, config, **{**options, "isolated": True})

    # -- the child's life ------------------------------------------------------------------
    def _start(self) -> ChildProcess:
        level = min(logging.getLogger(n).getEffectiveLevel() for n in ("edgespec", "edgespec.llama"))
        t0 = time.monotonic()
        child = ChildProcess(self, self._spec, level)
        child.ready.wait()
        if child.load_error is not None:
            child.closing = True
            child.process.join(10)
            raise _error(*child.load_error)
        if child.dead is not None:
            # exit code 1: what Python exits with when the main module's import fails
            hint = '; if your script loads the engine outside `if __name__ == "__main__":`, move it there'
            hint = f"{hint} (the engine's process imports the script)" if child.process.exitcode == 1 else ""
            raise EngineCrashed(f"the engine process died while loading the models ({child.cause}){hint}")
        self._load_s = time.monotonic() - t0
        facts = child.facts
        self.name, self.n_ctx, self.lookup = facts["name"], facts["n_ctx"], facts["lookup"]
        self._n_vocab = facts["n_vocab"]
        self.default_k, self.p_min = facts["default_k"], facts["p_min"]
        self._has_draft, self._info = facts["has_draft"], facts["info"]
        self.warnings = list(facts["warnings"])
        return child

    def child_died(self, child: ChildProcess, cause: str) -> None:
        """Runs on the dead child's reader thread: start a new child, a few times at most."""
        if self._closed or self._closing or child is not getattr(self, "_child", None):
            return  # a death while loading is _start's to report; one while closing needs no new child
        if multiprocessing.util._exiting:  # type: ignore[attr-defined]
            return  # the interpreter is ending and multiprocessing stops its children: not a crash
        self._state = "restarting"
        log.error("the engine process died (%s); restarting it", cause)
        self._restart_round()

    def _restart_round(self) -> None:
        """Start a new child, a few times at most with growing pauses; "failed" if none started."""
        for attempt in range(self._restarts):
            if attempt:
                time.sleep(self._backoff_s * 2 ** (attempt - 1))
            if self._closed:
                return
            try:
                new = self._start()
            except EdgespecError as err:
                log.error("restart %d of %d failed: %s", attempt + 1, self._restarts, err)
                self._failure = str(err)
                continue
            self._child = new
            self._state = "ok"
            if self._closed:
                new.close()
            log.error("the engine restarted in %.1f s (process %s)", self._load_s, new.pid)  # as its crash was
            return
        self._failed_at = time.monotonic()
        self._state = "failed"

    @property
    def state(self) -> str:
        """ "ok", "starting", "restarting" (after a crash), "failed" (could not restart), "closed"."""
        return "closed" if self._closed else self._state

    @property
    def pid(self) -> int | None:
        """The child process's id (the one to watch, or to kill in a test)."""
        return self._child.pid

    @property
    def retry_after(self) -> int:
        """Seconds a caller may wait before the engine is back after a crash (its last load time)."""
        return max(1, math.ceil(self._load_s) + 1)

    def _live_child(self) -> ChildProcess:
        if self._closed:
            raise EdgespecError(CLOSED)
        if self._state == "failed":  # what failed may be back (a rebooted RPC server): a call tries again
            with self._revive:
                wait = math.ceil(self._failed_at + self._retry_failed_s - time.monotonic())
                if self._state == "failed" and wait <= 0:
                    self._state = "restarting"
                    threading.Thread(target=self._restart_round, name="edgespec-revive", daemon=True).start()
            if self._state == "failed":
                why = f"the engine could not be restarted ({self._failure}); a call in {wait} s or later tries again"
                raise EngineCrashed(why, max(1, wait))
        if self._state != "ok":
            raise EngineCrashed("the engine is restarting after a crash; retry in a few seconds", self.retry_after)
        return self._child

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._ask(method, *args, **kwargs)
        except EngineCrashed:
            if self._closed:  # closed beside this call: the child's end is no crash
                raise EdgespecError(CLOSED) from None
            raise

    def _ask(self, method: str, *args: Any, **kwargs: Any) -> Any:
        child = self._live_child()
        cid = next(self._ids)
        q = child.open(cid)
        try:
            child.send(("call", cid, method, args, kwargs))
            try:
                kind, _, *rest = q.get(timeout=CALL_TIMEOUT_S)
            except queue.Empty:
                # a live child answers in milliseconds: this one is stuck, and another would be
                child.kill(f"it did not answer {method} within {CALL_TIMEOUT_S:g} s")
                raise EngineCrashed(
                    f"the engine did not answer ({method}) within {CALL_TIMEOUT_S:g} s; it is being restarted",
                    self.retry_after,
                ) from None
        finally:
            child.forget(cid)
        if kind == "crashed":
            raise EngineCrashed(rest[0], self.retry_after)
        ok, value = rest
        if not ok:
            raise _error(*value)
        return value

    def close(self) -> None:
        if self._closed:
            return
        self._closing = True  # from now a stream waiting for the engine gets CLOSED, not a turn
        close_running(self._running, _engine.LOCK_WAIT_S, undo=lambda: setattr(self, "_closing", False))
        with self._hold(closing=True):
            if self._closed:  # (a close beside this one)
                return
            self._closed = True
        self._finalizer.detach()
        self._child.close()

    # -- the Engine API -----------------------------------------------------------------------
    def info(self) -> EngineInfo:
        return self._info  # type: ignore[no-any-return]

    @property
    def has_draft(self) -> bool:
        return bool(self._has_draft)

    @property
    def can_speculate(self) -> bool:
        return bool(self._has_draft or self.lookup)

    def tokenize(self, prompt: Prompt, *, raw: bool = False, tools: ToolSet | None = None) -> list[int]:
        check_prompt(prompt)
        sent = prompt if isinstance(prompt, str) else list(prompt)  # any sequence crosses as a list
        return self._call("tokenize", sent, raw=raw, tools=tools)  # type: ignore[no-any-return]

    def tools(self, tools: Any, tool_choice: Any = "auto", *, parallel: bool = False) -> ToolSet | None:
        return self._call("tools", tools, tool_choice, parallel=parallel)  # type: ignore[no-any-return]

    def piece(self, token: int) -> bytes:
        # a round trip each, and a server asks for every token and alternative of its logprobs
        if token not in self._pieces:
            self._pieces[token] = self._call("piece", token)
        return self._pieces[token]

    def chat_text(self, messages: Sequence[dict], *, tools: ToolSet | None = None) -> str:
        return self._call("chat_text", list(messages), tools=tools)  # type: ignore[no-any-return]

    def reset(self) -> None:
        with self._hold():
            self._call("reset")

    def stream(self, prompt: Prompt, **options: Any) -> Generation:
        """As `Engine.stream`: options are checked and the prompt tokenized before it returns."""
        args = _STREAM.bind(self, prompt, **options)  # unknown options: TypeError, as in process
        args.apply_defaults()
        opts = dict(args.arguments)
        del opts["self"], opts["prompt"]
        raw = opts.pop("raw")
        opts["stop"] = check_stop(opts["stop"])
        make_penalties(  # its errors here, not at the first event
            opts["presence_penalty"], opts["frequency_penalty"], opts["repeat_penalty"], opts["repeat_last_n"],
            opts["logit_bias"], self._n_vocab,
        )  # fmt: skip
        params = SamplingParams(opts["temperature"], opts["top_k"], opts["top_p"], opts["min_p"], opts["seed"])
        check_params(params, opts["max_tokens"], opts["k"], opts["logprobs"])
        if isinstance(opts["tools"], list):  # OpenAI's list as it is
            opts["tools"] = self.tools(opts["tools"])
        schema = opts["json_schema"]
        if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
            opts["json_schema"] = schema.model_json_schema()  # data, for the child (which may not import it)
        check_structured_output(opts["json_schema"], opts["grammar"], opts["tools"])  # here, not in the child
        tokens = self.tokenize(prompt, raw=raw, tools=opts["tools"])
        return _Remote(self, tokens, opts)

    def _run_remote(self, gen: _Remote, tokens: list[int], options: dict[str, Any]) -> Iterator[StreamEvent]:
        # `gen` is a weak proxy (Generation): a handle dropped unfinished closes these events, whose
        # `finally` then runs without it, so what it needs of the handle is read here
        gid, cancelled = gen.gid, gen.cancelled
        with self._hold():
            child = self._live_child()
            q = child.open(gid)
            gen.child, self._running = child, gen
            last: StreamEvent | None = None
            ended = sent = False
            try:
                child.send(("run", gid, tokens, options))
                sent = True
                if cancelled.is_set():
                    child.cancel(gid, self.cancel_grace_s)
                while not ended:
                    kind, _, *rest = q.get()
                    ended = kind != "event"
                    if kind == "event":
                        last = rest[0]
                        if last.finish_reason is None:  # the last one waits for the stream's end
                            yield last
                    elif kind == "error":
                        raise _error(rest[0], rest[1])
                    elif kind == "crashed" and (last is None or last.finish_reason is None):
                        if not cancelled.is_set():
                            raise EngineCrashed(rest[0], self.retry_after)
                        stats = last.stats if last is not None else Stats()
                        last = StreamEvent("", (), (), stats, "cancelled")
            finally:
                if sent and not ended:  # closed early: stop the child's stream, wait for its end
                    finished = last is not None and last.finish_reason is not None
                    child.cancel(gid, self.cancel_grace_s, tell=not finished)
                    while q.get()[0] == "event":
                        pass
                child.forget(gid)
                self._running = None
        if last is not None and last.finish_reason is not None:
            yield last  # with the engine released, as in process


class _Current:
    """The engine's child of the moment (a restart replaces it), for the finalizer to close."""

    child: ChildProcess | None = None

    def close(self) -> None:
        if self.child is not None:
            self.child.close()


class _Remote(Generation):
    """A generation running in the child; `cancel()` reaches it at once."""

    def __init__(self, engine: IsolatedEngine, tokens: list[int], options: dict[str, Any]) -> None:
        self.gid = next(engine._ids)
        self.child: ChildProcess | None = None
        self._grace = engine.cancel_grace_s
        super().__init__(lambda gen: engine._run_remote(gen, tokens, options))  # type: ignore[arg-type]  # self's proxy

    def cancel(self) -> None:
        super().cancel()
        if self.child is not None:
            self.child.cancel(self.gid, self._grace)


def _spawn(target: str | Path, draft: str | Path | None, options: LoadOptions) -> Engine:
    return IsolatedEngine(ChildSpec(str(target), None if draft is None else str(draft), options))


_engine._isolate = _spawn  # what Engine.load(isolated=True) and Engine.from_pair(isolated=True) call
_OPEN: WeakSet[IsolatedEngine] = WeakSet()


@atexit.register  # after multiprocessing's own handler is registered, so it runs before it
def _close_open_engines() -> None:
    """A script that ends without `close()` ends its children quietly (multiprocessing's exit
    handler killed them, which read as a crash: a restart begun during shutdown, a traceback)."""
    for engine in list(_OPEN):
        if not engine._closed:  # not close(): a stream left open elsewhere would hold its lock
            engine._closed = True
            running = engine._running
            if running is not None:  # the child takes "close" once its generation ends
                with contextlib.suppress(ReferenceError):  # (a weak proxy of a dropped handle)
                    running.cancel()
            engine._child.close()


def _error(name: str, message: str) -> EdgespecError:
    """The child's error as the same class here (every user-facing class is in core.errors)."""
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, EdgespecError)):
        cls = EdgespecError
    return cls(message)
