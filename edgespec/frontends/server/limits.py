"""What a slow or idle client may hold, and for how long: uvicorn's settings for `edgespec serve`.

uvicorn bounds idle keep-alive connections (`timeout_keep_alive`), open
connections (`limit_concurrency`: past it a request gets 503 at once) and the
size of a request's headers (h11's incomplete-event limit), but not the time
its headers may take: a client that opens a connection and trickles its
headers would hold it forever, and a few hundred such clients would fill
`limit_concurrency`. `TimedH11` closes a connection whose request line and
headers are not all in `header_timeout_s` after it opened (or after its
previous response). The body's time is bounded in guard.py (408).
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from edgespec import defaults


class TimedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's headers."""

    header_timeout_s: float = defaults.HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._expect_headers()

    def on_response_complete(self) -> None:
        self._expect_headers()  # armed first: a pipelined request may start inside super()
        super().on_response_complete()

    def _expect_headers(self) -> None:
        self.loop.call_later(self.header_timeout_s, self._headers_due, self.cycle)

    def _headers_due(self, cycle: object) -> None:
        if self.cycle is cycle and not self.transport.is_closing():  # no new request has started
            self.transport.close()


def uvicorn_config(app: Any, *, header_timeout_s: float = defaults.HEADER_TIMEOUT_S, **options: Any) -> uvicorn.Config:
    """uvicorn's Config with the server's limits; `options` are uvicorn's (host, port, log_level...)."""
    protocol = type("TimedH11", (TimedH11,), {"header_timeout_s": header_timeout_s})
    return uvicorn.Config(
        app,
        http=protocol,
        timeout_keep_alive=defaults.KEEP_ALIVE_S,
        limit_concurrency=defaults.MAX_CONNECTIONS,
        h11_max_incomplete_event_size=defaults.MAX_HEADER_BYTES,
        server_header=False,
        **options,
    )
