"""The server's one-generation-at-a-time queue, and its metrics.

Concurrency lives here. Requests take turns through an asyncio lock, which
wakes waiters in arrival order; past `max_waiting` waiting requests, `start`
raises `QueueFull` (the app answers 503). Every call into the engine runs on
one worker thread, in submission order, so a finished or abandoned
generation's cleanup (closing its stream, which rewinds the caches and
releases the engine's lock) always runs before the next request's first step,
without the event loop ever waiting for it. Work that needs no turn
(tokenizing a prompt, rendering its chat template) runs on other threads
before the request queues (`prepare`), so a long prompt never stalls the
generation in progress.

A client that goes away is noticed by a task that waits for the ASGI
`http.disconnect` message: it sets `engine.cancel()`, which ends the
generation at the end of the step in flight, and the request's loop stops
asking for more steps. A request whose client left while it waited is
dropped when its turn comes, without generating.

When the server is told to stop (Ctrl-C, SIGTERM: `stop_soon`, from the signal handler),
the generation in progress ends at its step's end and its client is told the server is
stopping; requests still waiting, and any that arrive, get `ServerStopping` (503).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from edgespec import Engine, Generation, Stats, StreamEvent, defaults

log = logging.getLogger("edgespec.server")
T = TypeVar("T")
PREPARE_THREADS = 2  # prompts tokenized at once, beside the generation in progress


class QueueFull(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__("the server is busy: too many requests are waiting; retry later")
        self.retry_after = retry_after


class ClientGone(Exception):
    """The client disconnected before its turn came."""


class ServerStopping(Exception):
    retry_after = 5  # a restart of the demo pair takes about that

    def __init__(self) -> None:
        super().__init__("the server is stopping; retry in a few seconds")


class Metrics:
    """Counters for /metrics (Prometheus text format), updated on the event loop thread."""

    def __init__(self) -> None:
        self.responses: dict[int, int] = {}
        self.generations = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.generated_tokens = 0
        self.drafted = 0
        self.accepted = 0
        self.steps = 0
        self.decode_s = 0.0
        self.recent_s: deque[float] = deque(maxlen=defaults.RETRY_AFTER_WINDOW)  # the last requests' times
        self.last_k = 0
        self.last_s_per_token = 0.0

    def count_response(self, status: int) -> None:
        self.responses[status] = self.responses.get(status, 0) + 1

    def observe(self, s: Stats) -> None:
        self.generations += 1
        self.prompt_tokens += s.n_prompt
        self.cached_tokens += max(0, s.n_prompt - s.n_prefilled)
        self.generated_tokens += s.n_generated
        self.drafted += s.n_drafted
        self.accepted += s.n_accepted
        self.steps += s.steps
        self.decode_s += s.decode_s
        self.recent_s.append(s.elapsed_s)
        self.last_k = s.k
        if s.n_generated:
            self.last_s_per_token = s.decode_s / s.n_generated

    def retry_after(self, ahead: int) -> int:
        """Seconds until a request that `ahead` requests precede may get its turn: the queue as
        it is now (recent requests' times), not the history (slow requests long gone)."""
        mean = sum(self.recent_s) / len(self.recent_s) if self.recent_s else 1.0
        return max(1, min(60, math.ceil(mean * ahead)))

    def render(self, waiting: int, busy: bool) -> str:
        acceptance = self.accepted / self.drafted if self.drafted else 0.0
        rows: list[tuple[str, str, str, list[tuple[str, float]]]] = [
            (
                "requests_total",
                "counter",
                "HTTP responses by status code",
                [(f'{{code="{c}"}}', n) for c, n in sorted(self.responses.items())],
            ),
            (
                "generations_total",
                "counter",
                "generations run (finished or stopped)",
                [("", self.generations)],
            ),
            ("prompt_tokens_total", "counter", "prompt tokens", [("", self.prompt_tokens)]),
            (
                "prompt_tokens_cached_total",
                "counter",
                "prompt tokens reused from the cache",
                [("", self.cached_tokens)],
            ),
            (
                "generated_tokens_total",
                "counter",
                "tokens generated",
                [("", self.generated_tokens)],
            ),
            (
                "drafted_tokens_total",
                "counter",
                "draft tokens proposed (draft_n)",
                [("", self.drafted)],
            ),
            (
                "accepted_tokens_total",
                "counter",
                "draft tokens accepted (draft_n_accepted)",
                [("", self.accepted)],
            ),
            (
                "steps_total",
                "counter",
                "speculative steps (target forward passes)",
                [("", self.steps)],
            ),
            (
                "decode_seconds_total",
                "counter",
                "time spent decoding after prefill",
                [("", self.decode_s)],
            ),
            ("acceptance_rate", "gauge", "accepted / drafted since start", [("", acceptance)]),
            ("current_k", "gauge", "K the controller chose for the last step", [("", self.last_k)]),
            (
                "seconds_per_token",
                "gauge",
                "decode time per token of the last generation",
                [("", self.last_s_per_token)],
            ),
            ("queue_depth", "gauge", "requests waiting for the engine", [("", waiting)]),
            ("busy", "gauge", "1 while a generation runs", [("", int(busy))]),
        ]
        out = []
        for name, kind, help_, samples in rows:
            out += [f"# HELP edgespec_{name} {help_}", f"# TYPE edgespec_{name} {kind}"]
            out += [f"edgespec_{name}{labels} {value:g}" for labels, value in samples]
        return "\n".join(out) + "\n"


class GenerationQueue:
    """One generation at a time on `engine`, in arrival order, at most `max_waiting` waiting."""

    def __init__(self, engine: Engine, max_waiting: int, metrics: Metrics) -> None:
        self.engine = engine
        self.max_waiting = max_waiting
        self.metrics = metrics
        self.waiting = 0
        self.stopping = False
        self._job: Job | None = None  # the one with the turn
        self._loop: asyncio.AbstractEventLoop | None = None
        self._turn = asyncio.Lock()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="edgespec-generate")
        self._preparer = ThreadPoolExecutor(PREPARE_THREADS, thread_name_prefix="edgespec-tokenize")

    @property
    def running(self) -> bool:
        """Whether a request has the turn (a generation runs, or is being set up or released)."""
        return self._job is not None

    def bind(self) -> None:
        """Note the event loop this queue runs on (at the app's startup): `stop_soon` posts to it."""
        self._loop = asyncio.get_running_loop()

    def stop_soon(self) -> None:
        """The server is stopping: safe from a signal handler or another thread."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop)

    def _stop(self) -> None:
        self.stopping = True
        if (job := self._job) is not None and job.stream is not None:
            job.stream.cancel()  # ends at its step's end; its request tells the client

    def check_room(self) -> None:
        """Raise ServerStopping once the server stops, QueueFull when no more requests may wait."""
        if self.stopping:
            raise ServerStopping()
        if (self.running or self.waiting) and self.waiting >= self.max_waiting:
            raise QueueFull(self.metrics.retry_after(self.waiting + 1))  # those waiting and the one running

    async def prepare(self, fn: Callable[[], T]) -> T:
        """Run `fn` (tokenizing) off the engine's thread, without taking a turn."""
        return await asyncio.get_running_loop().run_in_executor(self._preparer, fn)

    async def start(self, receive: Callable[[], Any], make_stream: Callable[[], Generation]) -> Job:
        """Wait for this request's turn and open its stream (on the worker thread).

        Raises QueueFull when too many wait, ClientGone when the client left while
        waiting, and whatever `make_stream` raises (EdgespecError for a bad prompt).
        """
        self.check_room()
        if self._loop is None:  # an app whose lifespan did not run (mounted in another, lifespan off)
            self._loop = asyncio.get_running_loop()
        job = Job(self, receive)
        self.waiting += 1
        try:
            await self._turn.acquire()
        except BaseException:
            job.close()
            raise
        finally:
            self.waiting -= 1
        self._job, job.has_turn = job, True
        try:
            if job.gone:
                raise ClientGone()
            if self.stopping:
                raise ServerStopping()
            job.stream = await self.call(make_stream)
            if self.stopping:  # it came while the stream was made
                job.stream.cancel()
        except BaseException:
            job.close()
            raise
        return job

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn, *args)

    def _release(self, stream: Generation | None) -> None:
        try:
            if stream is not None:
                try:  # queued behind the step in flight, ahead of the next request's first step
                    self._worker.submit(stream.close)
                except RuntimeError:  # the server is stopping (the worker is shut down): the engine's close ends it
                    stream.cancel()
        finally:
            self._job = None
            self._turn.release()

    def shutdown(self) -> None:
        self.engine.cancel()
        self._worker.shutdown(wait=False, cancel_futures=True)
        self._preparer.shutdown(wait=False, cancel_futures=True)


class Job:
    """One request's turn on the engine: `next()` runs one step; `close()` always ends it."""

    def __init__(self, queue: GenerationQueue, receive: Callable[[], Any]) -> None:
        self.queue = queue
        self.stream: Generation | None = None
        self.has_turn = False
        self.gone = False
        self.finished = False
        self.last: StreamEvent | None = None
        self._closed = False
        self._watch = asyncio.ensure_future(self._watch_disconnect(receive))

    async def _watch_disconnect(self, receive: Callable[[], Any]) -> None:
        with contextlib.suppress(Exception):
            while (await receive())["type"] != "http.disconnect":
                pass
            self.gone = True
            if self.has_turn and not self.finished and self.stream is not None:
                self.stream.cancel()  # the step in flight is the last one

    async def next(self) -> StreamEvent:
        assert self.stream is not None
        event = await self.queue.call(next, self.stream, None)
        if event is None:  # the engine's stream always ends with a finish_reason; be safe anyway
            assert self.last is not None
            event = StreamEvent("", (), (), self.last.stats, "stop")
        self.last = event
        self.finished = event.finish_reason is not None
        return event

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._watch.cancel()
        if not self.has_turn:
            return
        if not self.finished and self.stream is not None:
            self.stream.cancel()
        if self.last is not None:
            self.queue.metrics.observe(self.last.stats)
        self.queue._release(self.stream)
