"""RPC endpoints, before any native code sees them: parsed, and reached.

llama.cpp's RPC backend puts a model's layers on another machine's rpc-server
(`edgespec rpc-server` there). Its native client aborts or hangs on an endpoint
it cannot use, so every endpoint is parsed here and a TCP connection is opened
to it first: a typo or a server that is not running is one line that says what
to do, before anything loads. rpc-server has no authentication: anyone who can
reach its port can allocate memory and run graphs there.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

from ..core import defaults
from ..core.errors import ConfigError

DEFAULT_PORT = defaults.RPC_PORT
CONNECT_TIMEOUT_S = 3.0


def parse_endpoints(value: str | Iterable[str]) -> tuple[str, ...]:
    """ "HOST:PORT[,HOST:PORT...]" (or a list of them) as a tuple of "host:port" strings."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in (str(i).strip() for i in items):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"RPC server {item!r} is not HOST:PORT (e.g. 192.168.1.20:{DEFAULT_PORT})")
        if ":" in host or "[" in host:
            raise ConfigError(f"RPC server {item!r}: llama.cpp's RPC speaks IPv4 or host names only")
        out.append(f"{host}:{int(port)}")
    if not out:
        raise ConfigError(f"give at least one RPC server as HOST:PORT (e.g. 127.0.0.1:{DEFAULT_PORT})")
    return tuple(out)


def check_reachable(endpoints: Iterable[str], timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Open (and close) a TCP connection to each endpoint; a ConfigError names the first
    one that does not answer."""
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                pass
        except OSError as err:
            why = err.strerror or type(err).__name__
            raise ConfigError(
                f"cannot reach the RPC server at {endpoint} ({why.lower()}); start it there with "
                f"`edgespec rpc-server --port {port}` (and --host for a non-loopback address)"
            ) from err
