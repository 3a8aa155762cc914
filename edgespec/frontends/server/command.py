"""`edgespec serve`: the subcommand (registered through the `edgespec.commands` entry point).

Options are checked before minutes of model loading; the app itself (and
FastAPI) is imported only when the command runs, so other commands start fast.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import socket
import sys
from typing import Any

from edgespec import EdgespecError, Engine, defaults
from edgespec.frontends import options as shared


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="a local OpenAI-compatible endpoint (chat and completions, streamed)",
        description="Serve the pair at http://HOST:PORT/v1 (OpenAI-compatible). The sampling "
        "options are defaults for fields a request leaves out.",
    )
    shared.add_model_args(p)
    shared.add_isolation_arg(p)
    shared.add_sampling_args(p)
    g = p.add_argument_group("server")
    g.add_argument(
        "--host",
        default=defaults.HOST,
        help=f"address to bind (default {defaults.HOST}; anything else needs an API key)",
    )
    g.add_argument("--port", type=int, default=defaults.PORT, help=f"port (default {defaults.PORT})")
    g.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' (default: $EDGESPEC_API_KEY; the variable keeps the key out of `ps`)",
    )
    g.add_argument(
        "--cors-origin",
        default=None,
        help="let browser pages from this one origin call the server (default: no CORS)",
    )
    g.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also accept this Host header (the name remote clients use; repeatable)",
    )
    g.add_argument(
        "--max-tokens-cap",
        type=int,
        default=defaults.MAX_TOKENS_CAP,
        metavar="N",
        help="the most tokens one request may generate, whatever it asks: no request holds the engine "
        f"for the whole context (default {defaults.MAX_TOKENS_CAP})",
    )
    g.add_argument(
        "--queue",
        type=int,
        default=defaults.QUEUE,
        help=f"requests that may wait for the engine; more get 503 (default {defaults.QUEUE})",
    )
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from .guard import check_bind

    api_key = args.api_key or os.environ.get("EDGESPEC_API_KEY") or None
    check_bind(args.host, api_key)  # before minutes of model loading
    if not 0 < args.port < 65536:
        raise EdgespecError(f"--port must be between 1 and 65535 (got {args.port})")
    if args.queue < 0:
        raise EdgespecError(f"--queue must be >= 0 (got {args.queue})")
    if args.max_tokens_cap < 1:
        raise EdgespecError(f"--max-tokens-cap must be >= 1 (got {args.max_tokens_cap})")
    check_free(args.host, args.port)  # uvicorn binds it once the models are loaded
    engine = shared.engine_from_args(args, isolated=not args.in_process)
    try:
        return _serve(args, engine, api_key)
    finally:
        engine.close()


def _serve(args: argparse.Namespace, engine: Engine, api_key: str | None) -> int:
    from .app import create_app
    from .limits import uvicorn_config
    from .running import stopping_server

    for w in engine.warnings:
        print(f"warning: {w}", file=sys.stderr)
    app = create_app(
        engine,
        api_key=api_key,
        host=args.host,
        port=args.port,
        cors_origin=args.cors_origin,
        max_queue=args.queue,
        defaults=shared.sampling_options(args),
        allowed_hosts=tuple(args.allow_host),
        max_tokens_cap=args.max_tokens_cap,
    )
    bound = f"[{args.host}]" if ":" in args.host else args.host
    serving = (
        f"edgespec: serving {engine.name} at http://{bound}:{args.port}/v1"
        f"{' (API key required)' if api_key else ''}; Ctrl-C stops"
    )
    config = uvicorn_config(
        app,
        host=args.host,
        port=args.port,
        log_level="info" if args.verbose else "warning",
        timeout_graceful_shutdown=3,
    )
    server = stopping_server(app, config, on_started=lambda: print(serving, file=sys.stderr))
    # uvicorn stops gracefully on SIGTERM as on Ctrl-C, then raises the signal again: here that
    # ends run() as Ctrl-C's KeyboardInterrupt does, so the engine is closed (not killed with it)
    term = signal.signal(signal.SIGTERM, _terminated)
    try:
        with contextlib.suppress(KeyboardInterrupt, Terminated):
            server.run()
    except SystemExit:  # uvicorn's startup failed (it logged why: the port taken since the check)
        pass
    finally:
        signal.signal(signal.SIGTERM, term)
    if not server.started:
        raise EdgespecError(f"could not serve at {bound}:{args.port} (see the line above)")
    return 0


class Terminated(Exception):
    """SIGTERM, once uvicorn has stopped serving."""


def _terminated(sig: int, frame: object) -> None:
    raise Terminated()


def check_free(host: str, port: int) -> None:
    """Bind each address `host` names at `port` as uvicorn will (asyncio's create_server), then
    let go: a port in use, an address that is not this machine's or a port that needs root is
    one line before minutes of model loading."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        found = {(i[0], i[4]) for i in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)}
        for family, address in found:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
    except OSError as err:
        why = {
            errno.EADDRINUSE: "another server is there; pick another --port",
            errno.EACCES: "ports below 1024 need root; pick another --port",
        }.get(err.errno or 0, "check --host")
        raise EdgespecError(f"cannot serve at {where}: {err.strerror or err} ({why})") from err
