"""A TCP relay that adds a network's delay: what RPC costs over a LAN, on one machine.

`DelayRelay(("127.0.0.1", 50052), rtt_ms=5)` listens on a free loopback port and
forwards every connection to the target, holding each chunk of bytes rtt/2 in each
direction. Chunks keep flowing while earlier ones wait (a reader and a writer per
direction), so the delay is latency only, not a bandwidth cap: a round trip costs
rtt_ms more than on loopback, as on a quiet LAN.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from types import TracebackType

CHUNK = 1 << 16


class DelayRelay:
    def __init__(self, target: tuple[str, int], rtt_ms: float) -> None:
        self.target = target
        self.delay_s = rtt_ms / 2000.0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
                server = socket.create_connection(self.target)
            except OSError:
                return
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, server]
            self._pipe(client, server)
            self._pipe(server, client)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        held: queue.Queue[tuple[float, bytes]] = queue.Queue()

        def read() -> None:
            while True:
                try:
                    data = src.recv(CHUNK)
                except OSError:
                    data = b""
                held.put((time.monotonic() + self.delay_s, data))
                if not data:
                    return

        def write() -> None:
            while True:
                due, data = held.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                try:
                    if not data:
                        dst.shutdown(socket.SHUT_WR)
                        return
                    dst.sendall(data)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        for s in (self._listener, *self._sockets):
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> DelayRelay:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
