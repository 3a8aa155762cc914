"""`serve_rpc`: this machine's CPU or GPUs as an rpc-server for another machine's engine.

It runs llama.cpp's own RPC server (ggml's `ggml_backend_rpc_start_server`, the
function llama.cpp's rpc-server tool is a thin main around) from the same
llama.cpp build the engine uses, so client and server speak one protocol version.
No authentication: bind it to loopback, or to a network only you can reach.
"""

from __future__ import annotations

import errno
import socket
import threading

from ..core import defaults
from ..core.errors import ConfigError
from ..llama import backend
from ..llama.config import check_threads

LOOPBACK = ("127.0.0.1", "localhost")  # where binding needs no warning


def check_bindable(host: str, port: int) -> None:
    """A ConfigError when `host:port` cannot be bound (in use, or not this machine's address)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as err:
        what = "give an address of this machine" if err.errno == errno.EADDRNOTAVAIL else "pick another port"
        raise ConfigError(f"cannot listen on {host}:{port} ({(err.strerror or str(err)).lower()}); {what}") from err


def serve_rpc(
    host: str = defaults.RPC_HOST, port: int = defaults.RPC_PORT, threads: int | None = None
) -> threading.Thread:
    """Start the RPC server on a daemon thread and return it (it runs until the process ends;
    the thread ends early only if the server could not start)."""
    if ":" in host:
        raise ConfigError(f"llama.cpp's RPC server listens on IPv4 addresses only (got {host})")
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError(f"the RPC server's port must be 1..65535 (got {port})")
    try:  # llama.cpp takes a dotted IPv4 address only (inet_addr): a name is resolved here
        host = socket.gethostbyname(host) if host else ""
    except (OSError, UnicodeError, ValueError, TypeError) as err:  # (idna, a NUL byte)
        raise ConfigError(f"cannot resolve {host!r} to an IPv4 address ({err}); give one, e.g. 127.0.0.1") from None
    if not host:
        raise ConfigError("the RPC server's host is empty; give an IPv4 address, e.g. 127.0.0.1")
    check_threads(threads)
    check_bindable(host, port)
    endpoint = f"{host}:{port}"
    threads = threads or backend.default_threads()
    backend.rpc_server_function()  # a build without RPC fails here, in one line, not on the thread
    t = threading.Thread(target=backend.serve_rpc, args=(endpoint, threads), name="rpc-server", daemon=True)
    t.start()
    return t


def served_devices() -> list[str]:
    """The names of the devices `serve_rpc` serves (this machine's GPUs, else its CPU)."""
    return backend.device_names(backend.rpc_served_devices())
