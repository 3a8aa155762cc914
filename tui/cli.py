"""`edgespec chat`: registered through the `edgespec.commands` entry point.

`add_parser(sub)` adds the subcommand with the same model and sampling options as
`edgespec run`; the engine loads before the app starts, so a failed load is one
line on stderr and exit code 2, like every other command. The engine runs in a
child process unless `--in-process`: a crash there is an error message in the
chat and a restart, never a lost conversation. Chats are saved as they go
(tui/store.py); `--list` prints them, `--resume [ID]` continues one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    from edgespec.frontends.options import add_isolation_arg, add_model_args, add_sampling_args

    p = sub.add_parser(
        "chat",
        help="terminal chat that shows speculation at work (Textual)",
        description="Chat with a model pair in the terminal. Keys: Enter sends, Esc stops, "
        "ctrl+n new chat, ctrl+t speculation on/off, ctrl+g draft/target colours, "
        "ctrl+up/down temperature, ctrl+o model info, ctrl+s save (or /save PATH), ctrl+q quits.",
    )
    add_model_args(p)
    add_isolation_arg(p)
    add_sampling_args(p, max_tokens=None)  # a reply runs to the end of the answer (or of the context)
    p.add_argument("--no-highlight", action="store_true", help="start with draft/target colouring off")
    g = p.add_argument_group("saved chats (in $EDGESPEC_HOME/chats/)")
    g.add_argument(
        "--list", action="store_true", help="print the saved chats (id, time, messages, first words) and exit"
    )
    g.add_argument(
        "--resume",
        nargs="?",
        const="",
        default=None,
        metavar="ID",
        help="continue a saved chat: the most recent, or the one with this id",
    )
    p.set_defaults(func=cmd_chat)
    return p


def cmd_chat(args: argparse.Namespace) -> int:
    from edgespec.frontends.options import engine_from_args

    from .app import ChatOptions, create_app
    from .store import chats_dir, find_chat, read_chats

    if args.list:
        chats, bad = read_chats()  # the folder read once
        for chat in chats:
            print(chat.summary())
        for chat_id, why in bad.items():
            print(f"edgespec: the saved chat {chats_dir() / chat_id}.json cannot be read ({why})", file=sys.stderr)
        if not chats:
            print(f"no saved chats in {chats_dir()}; start one with `edgespec chat`")
        return 0
    resume = find_chat(args.resume or None, warn=_warn) if args.resume is not None else None  # before the loading
    engine = engine_from_args(args, isolated=not args.in_process)  # model preparation reports on stderr
    options = ChatOptions.from_args(args)
    options.highlight = not args.no_highlight
    options.chats_dir, options.resume = chats_dir(), resume
    app = create_app(engine, options=options)
    try:
        app.run()
    finally:
        engine.cancel()
        engine.close()
    return app.return_code or 0  # 143 after SIGTERM


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m edgespec_tui [options]`: the same as `edgespec chat [options]`."""
    from edgespec.frontends.options import run_command

    parser = argparse.ArgumentParser(prog="python -m edgespec_tui")
    add_parser(parser.add_subparsers(dest="command", required=True)).prog = parser.prog  # no "chat" in its usage
    return run_command(parser.parse_args(["chat", *(sys.argv[1:] if argv is None else argv)]))


def _warn(message: str) -> None:
    print(f"edgespec: {message}", file=sys.stderr)
