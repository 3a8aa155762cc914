"""The server's front door: the bind check, the Host/key/body-size guard, OpenAI-shaped errors.

`Guard` is plain ASGI middleware (not Starlette's BaseHTTPMiddleware, which
buffers streams and hides disconnects). For every HTTP request, in order:
a Host header that is not the bound host, localhost, 127.0.0.1 or [::1]
(port ignored) gets 403, which stops DNS-rebinding pages from reaching a
loopback server; a missing or wrong API key gets 401 (compared with
hmac.compare_digest; /health is exempt); a body over the limit gets 413,
judged by Content-Length and by the bytes actually received (a chunked body
is read up to the limit, never past it); a body that takes longer than
`body_timeout_s` to arrive gets 408. The checked body is then replayed to
the app, and later `receive()` calls pass through, so the app still sees the
client's disconnect. An exception that escapes the app is logged once and
answered here with a 500 in OpenAI's shape, so /metrics counts it too (past
this point Starlette would log it a second time and answer unseen).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
from collections.abc import Iterable
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edgespec import EdgespecError, defaults

log = logging.getLogger("edgespec.server")
MAX_BODY = 1024 * 1024
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    503: "server_error",
}


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""
    return {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "server_error"),
            "param": param,
            "code": code,
        }
    }


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse to serve beyond this machine without an API key."""
    if not is_loopback(host) and not api_key:
        raise EdgespecError(
            f"refusing to bind {host} without an API key: anyone on the network could use it; "
            "pass --api-key KEY (or set EDGESPEC_API_KEY), or bind 127.0.0.1"
        )


def allowed_host_names(host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    bound = f"[{host.strip('[]')}]" if ":" in host else host
    return frozenset(h.lower() for h in (bound, *LOOPBACK_NAMES, *extra))


def host_name(header: str | None) -> str:
    """'Example.com:8080' -> 'example.com'; '[::1]:8080' -> '[::1]'."""
    value = (header or "").strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0].rstrip(".")


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: frozenset[str],
        api_key: str | None,
        metrics: Any,
        max_body: int = MAX_BODY,
        body_timeout_s: float = defaults.BODY_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.body_timeout_s = body_timeout_s
        self.hosts = hosts
        self.key = api_key.encode() if api_key else None
        self.metrics = metrics
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = self._counting(send)
        headers = Headers(scope=scope)
        if host_name(headers.get("host")) not in self.hosts:
            await reply(
                send,
                403,
                "this Host header is not allowed (the server answers only its bound host, "
                "localhost and 127.0.0.1; see --allow-host)",
                code="host_not_allowed",
            )
            return
        if self.key is not None and scope["path"] != "/health" and scope["method"] != "OPTIONS":
            given = headers.get("authorization", "")
            token = given[7:].strip() if given[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(token.encode(), self.key):
                await reply(
                    send,
                    401,
                    "missing or wrong API key: send 'Authorization: Bearer KEY'",
                    code="invalid_api_key",
                    extra=[(b"www-authenticate", b"Bearer")],
                )
                return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            length = headers.get("content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body):
                status = 413 if length.isdigit() else 400
                await reply(
                    send,
                    status,
                    f"the request body is over {self.max_body} bytes" if status == 413 else "bad Content-Length header",
                    code="request_too_large",
                )
                return
            try:
                body = await asyncio.wait_for(self._read_body(receive), self.body_timeout_s)
            except asyncio.TimeoutError:
                await reply(
                    send,
                    408,
                    f"the request body did not arrive within {self.body_timeout_s:g} s; send it at once",
                    code="request_timeout",
                )
                return
            if body is None:
                await reply(
                    send,
                    413,
                    f"the request body is over {self.max_body} bytes",
                    code="request_too_large",
                )
                return
            receive = _replay(body, receive)
        await self._run_app(scope, receive, send)

    async def _run_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def watching_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watching_send)
        except Exception:
            if started:  # too late for a status: the server closes the connection and logs it
                raise
            log.exception("request failed: %s %s", scope["method"], scope["path"])
            await reply(send, 500, "internal server error; see the server log")

    async def _read_body(self, receive: Receive) -> bytes | None:
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(parts)  # disconnected: the app will see it on its next receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    def _counting(self, send: Send) -> Send:
        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.count_response(message["status"])
            await send(message)

        return counting_send


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def reply(
    send: Send,
    status: int,
    message: str,
    *,
    code: str | None = None,
    extra: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    body = json.dumps(error_body(status, message, code=code)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
