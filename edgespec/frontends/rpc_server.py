"""`edgespec rpc-server`: lend this machine's CPU or GPUs to an engine on another machine
(`--rpc HOST:PORT` there). Registered through the `edgespec.commands` entry point."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from edgespec import EdgespecError, defaults, serve_rpc, served_devices
from edgespec.api.rpc import LOOPBACK


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "rpc-server",
        help="serve this machine's CPU/GPUs to an engine elsewhere (llama.cpp's RPC)",
        description="Run llama.cpp's RPC server so that `edgespec run|chat|serve --rpc HOST:PORT` on "
        "another machine places the target's layers here. It has NO authentication: whoever reaches "
        "the port can use this machine's memory and compute. Keep the default loopback address "
        "unless the network between the two machines is yours alone.",
    )
    p.add_argument(
        "--host", default=defaults.RPC_HOST, help=f"address to bind (default {defaults.RPC_HOST}: this machine only)"
    )
    p.add_argument("--port", type=int, default=defaults.RPC_PORT, help=f"port (default {defaults.RPC_PORT})")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: physical cores)")
    p.set_defaults(func=cmd_rpc_server)


def cmd_rpc_server(args: argparse.Namespace) -> int:
    thread = serve_rpc(args.host, args.port, args.threads)  # an EdgespecError: one line, exit 2
    if args.host not in LOOPBACK:
        print(
            f"edgespec: warning: rpc-server on {args.host} has no authentication: anyone who can reach port "
            f"{args.port} can use this machine's memory and compute. Use it only on a network you control.",
            file=sys.stderr,
        )
    names = ", ".join(served_devices())
    thread.join(0.5)  # a server that cannot start ends at once: no "serving" line before its failure
    if not thread.is_alive():
        raise EdgespecError(f"llama.cpp's RPC server stopped at once (is {args.host}:{args.port} free?)")
    print(f"rpc-server: serving {names} at {args.host}:{args.port}; Ctrl-C stops it", flush=True)
    try:
        while thread.is_alive():
            time.sleep(0.5)
    except KeyboardInterrupt:
        os._exit(0)  # the server's native accept loop cannot be interrupted; end the process
    raise EdgespecError(f"llama.cpp's RPC server stopped at once (is {args.host}:{args.port} free?)")
