"""Running the app with uvicorn: a socket bound for it, a Server that tells the app's queue
when it is told to stop, and `serve_in_thread` for tests and embedding."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI

from edgespec import defaults

from .queue import GenerationQueue


@contextlib.contextmanager
def serve_in_thread(
    app: FastAPI, host: str = "127.0.0.1", port: int = 0, header_timeout_s: float = defaults.HEADER_TIMEOUT_S
) -> Iterator[str]:
    """Run `app` with uvicorn in a background thread (port 0: any free port); yield its base URL.
    Leaving the block stops it as Ctrl-C stops `edgespec serve`: a generation still running ends."""
    from .limits import uvicorn_config

    sock = bind_socket(host, port)
    config = uvicorn_config(app, header_timeout_s=header_timeout_s, log_level="warning", timeout_graceful_shutdown=2)
    server = stopping_server(app, config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    try:
        bound = f"[{host}]" if ":" in host else host
        yield f"http://{bound}:{sock.getsockname()[1]}"
    finally:
        server.handle_exit(signal.SIGINT, None)  # as Ctrl-C stops `edgespec serve` (no signal: a thread)
        thread.join(10)
        sock.close()


def bind_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port for uvicorn to listen on (OSError when it cannot be)."""
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on such sockets; without it every
    # response waits ~40 ms for a delayed ACK
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def stopping_server(app: FastAPI, config: Any, on_started: Callable[[], None] | None = None) -> Any:
    """uvicorn's Server for `app`, which tells the app's queue (`create_app`'s, where `app` is
    one) the moment it is told to stop: the generation in progress ends and says so, and
    waiting requests get 503, instead of uvicorn cutting them off when its graceful wait runs
    out. `on_started` runs once it listens."""
    import uvicorn

    queue: GenerationQueue | None = getattr(app.state, "queue", None)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            if queue is not None:
                queue.stop_soon()

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started and on_started is not None:
                on_started()

    return Server(config)
