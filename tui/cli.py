"""`edgespec chat`: registered through the `edgespec.commands` entry point.

`add_parser(sub)` adds the subcommand with the same model and sampling options as
`edgespec run`; the engine loads before the app starts, so a failed load is one
line on stderr and exit code 2, like every other command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    from edgespec.frontends.options import add_model_args, add_sampling_args

    p = sub.add_parser(
        "chat",
        help="terminal chat that shows speculation at work (Textual)",
        description="Chat with a model pair in the terminal. Keys: Enter sends, Esc stops, "
        "ctrl+n new chat, ctrl+t speculation on/off, ctrl+g draft/target colours, "
        "ctrl+up/down temperature, ctrl+o model info, ctrl+s save (or /save PATH), ctrl+q quits.",
    )
    add_model_args(p)
    add_sampling_args(p)
    p.add_argument("--no-highlight", action="store_true", help="start with draft/target colouring off")
    p.set_defaults(func=cmd_chat)
    return p


def cmd_chat(args: argparse.Namespace) -> int:
    from edgespec.frontends.options import engine_from_args

    from .app import ChatOptions, create_app

    engine = engine_from_args(args)  # model preparation (first run) reports on stderr
    options = ChatOptions.from_args(args)
    options.highlight = not args.no_highlight
    try:
        create_app(engine, options=options).run()
    finally:
        engine.cancel()
        engine.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m edgespec_tui [options]`: the same as `edgespec chat [options]`."""
    from edgespec.frontends.options import run_command

    parser = argparse.ArgumentParser(prog="python -m edgespec_tui")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run_command(parser.parse_args(["chat", *(sys.argv[1:] if argv is None else argv)]))
