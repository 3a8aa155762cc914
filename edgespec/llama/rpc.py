"""RPC endpoints, before any native code sees them: parsed, and reached.

llama.cpp's RPC backend puts a model's layers on another machine's rpc-server
(`edgespec rpc-server` there). Its native client aborts or hangs on an endpoint
it cannot use, so every endpoint is parsed here and greeted first with the
protocol's hello: a typo, a server that is not running, one busy with another
client, or another service on the port is one line that says what to do, before
anything loads. rpc-server has no authentication: anyone who can
reach its port can allocate memory and run graphs there.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable

from ..core import defaults
from ..core.errors import ConfigError

DEFAULT_PORT = defaults.RPC_PORT
CONNECT_TIMEOUT_S = 3.0
HELLO_TIMEOUT_S = 5.0  # a free rpc-server answers at once; a busy one not until its client leaves
# ggml-rpc's protocol as the pinned llama.cpp speaks it (ggml-rpc.cpp, ggml-rpc.h, transport.h)
RPC_CMD_HELLO = 14
RPC_CAPS_SIZE = 24
RPC_PROTO_MAJOR = 7


def parse_endpoints(value: str | Iterable[str]) -> tuple[str, ...]:
    """ "HOST:PORT[,HOST:PORT...]" (or a list of them) as a tuple of "host:port" strings."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in (str(i).strip() for i in items):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise ConfigError(f"RPC server {item!r} is not HOST:PORT (e.g. 192.168.1.20:{DEFAULT_PORT})")
        if ":" in host or "[" in host:
            raise ConfigError(f"RPC server {item!r}: llama.cpp's RPC speaks IPv4 or host names only")
        out.append(f"{host}:{int(port)}")
    if not out:
        raise ConfigError(f"give at least one RPC server as HOST:PORT (e.g. 127.0.0.1:{DEFAULT_PORT})")
    return tuple(out)


def check_reachable(
    endpoints: Iterable[str], timeout_s: float = CONNECT_TIMEOUT_S, *, known: Iterable[str] = ()
) -> None:
    """Connect to each endpoint and say hello as llama.cpp's RPC client does (`known`: endpoints
    this process already uses, only connected to); a ConfigError names the first that cannot
    serve. The native client waits for the hello's answer with no timeout: an rpc-server busy
    with another client (it serves one at a time), one named twice, or another service on the
    port hung the load with no word."""
    seen: dict[tuple[str, int], str] = {}
    known = set(known)
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        try:
            ip = str(socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
            address = (ip, int(port))
            with socket.create_connection(address, timeout=timeout_s) as sock:
                if address in seen:
                    raise ConfigError(f"{seen[address]} and {endpoint} are the same RPC server; name it once")
                seen[address] = endpoint
                if endpoint not in known:
                    _hello(sock, endpoint)
        except (OSError, UnicodeError, ValueError) as err:  # (a name idna cannot encode: "bad..name")
            why = getattr(err, "strerror", None) or str(err) or type(err).__name__
            raise ConfigError(
                f"cannot reach the RPC server at {endpoint} ({why.lower()}); start it there with "
                f"`edgespec rpc-server --port {port}` (and --host for a non-loopback address)"
            ) from err


def _hello(sock: socket.socket, endpoint: str) -> None:
    """ggml-rpc's HELLO: command 14, the request's size, 24 bytes of transport capabilities
    (zeros: plain TCP); the answer is its size, then major, minor, patch, padding, capabilities."""
    sock.settimeout(HELLO_TIMEOUT_S)
    try:
        sock.sendall(bytes([RPC_CMD_HELLO]) + struct.pack("<Q", RPC_CAPS_SIZE) + bytes(RPC_CAPS_SIZE))
        size = struct.unpack("<Q", _recv_exact(sock, 8))[0]
        if size != 4 + RPC_CAPS_SIZE:
            raise ConfigError(f"{endpoint} answered, but not as llama.cpp's rpc-server does; check the port")
        major, minor, patch = _recv_exact(sock, size)[:3]
    except TimeoutError:
        raise ConfigError(
            f"the RPC server at {endpoint} took the connection but did not answer in {HELLO_TIMEOUT_S:g} s: "
            "an rpc-server serves one client at a time, so another engine may be using it "
            "(or the port is another service's)"
        ) from None
    if major != RPC_PROTO_MAJOR:
        raise ConfigError(
            f"the RPC server at {endpoint} speaks llama.cpp's RPC protocol {major}.{minor}.{patch}, this "
            f"build {RPC_PROTO_MAJOR}.x: run the same edgespec (and llama-cpp-python) version there"
        )


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError(104, "the server closed the connection")
        data += chunk
    return data
