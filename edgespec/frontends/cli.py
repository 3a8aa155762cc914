"""The `edgespec` command: run, inspect and models here; serve, bench and chat come from
the `edgespec.commands` entry points, so that no frontend imports another.

Every error a user can cause is an EdgespecError: it is printed as one line on
stderr and the command exits with code 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, NoReturn

from edgespec import EdgespecError
from edgespec.api.prompts import utf8_text

from .interrupt import quit_on_second_interrupt
from .options import (
    add_model_args,
    add_sampling_args,
    engine_from_args,
    format_stats,
    run_command,
    sampling_options,
    setup_logging,
)


def cmd_run(args: argparse.Namespace) -> int:
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    utf8_text(prompt)  # what needs no model is refused before minutes of loading
    if not prompt:  # as a chat message too: an empty question is a slip, not a request
        raise EdgespecError("the prompt is empty; give it text (--prompt TEXT, or --prompt - to read stdin)")
    constraint = _constraint(args)  # a bad schema too
    with quit_on_second_interrupt():  # llama.cpp waiting on a frozen RPC server never returns to Python
        return _run(args, prompt, constraint)


def _run(args: argparse.Namespace, prompt: str, constraint: dict[str, Any]) -> int:
    engine = engine_from_args(args)
    shown = list(engine.warnings)
    for w in shown:
        print(f"warning: {w}", file=sys.stderr)
    opts = sampling_options(args)
    if args.stop:
        opts["stop"] = args.stop
    opts.update(constraint)
    if args.json:
        res = engine.generate(prompt, raw=args.raw, **opts)
        print(
            json.dumps(
                {
                    "text": res.text,
                    "tokens": res.tokens,
                    "finish_reason": res.finish_reason,
                    "stats": res.stats.as_dict(),
                    "warnings": res.warnings,
                }
            )
        )
        return 0
    event = None
    try:
        for event in engine.stream(prompt, raw=args.raw, **opts):
            sys.stdout.write(event.text)
            sys.stdout.flush()
    except KeyboardInterrupt:  # "edgespec: interrupted" on a line of its own, not after the answer's last word
        sys.stdout.write("\n" if event is not None else "")
        raise
    sys.stdout.write("\n")
    if event is not None:
        print(f"[{event.finish_reason}] {format_stats(event.stats)}", file=sys.stderr)
    for w in engine.warnings:
        if w not in shown:  # e.g. the measured verdict on a low-bit draft
            print(f"warning: {w}", file=sys.stderr)
    return 0


def _constraint(args: argparse.Namespace) -> dict[str, Any]:
    """`Engine.stream`'s json_schema / grammar from --json-schema / --grammar, checked now."""
    from edgespec.core.grammar import compile_grammar

    out: dict[str, Any] = {}
    if args.json_schema is not None and args.grammar is not None:  # (the library's words name its keywords)
        raise EdgespecError("give either --json-schema or --grammar, not both")
    for option, key in (("json_schema", "json_schema"), ("grammar", "grammar")):
        path = getattr(args, option)
        if path is None:
            continue
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise EdgespecError(f"cannot read --{option.replace('_', '-')} {path}: {err}") from None
        out[key] = text
    if out:
        compile_grammar(json_schema=out.get("json_schema"), lark=out.get("grammar"))
    return out


def cmd_inspect(args: argparse.Namespace) -> int:
    from edgespec.llama.gguf_file import describe, read_gguf
    from edgespec.llama.pair import pair_verdict

    infos = [read_gguf(p) for p in (args.path, args.draft) if p is not None]
    out: dict[str, Any] = {"models": [describe(i) for i in infos]}
    if len(infos) == 2:
        out["pair"] = pair_verdict(infos[0], infos[1]).as_dict()
    verdict = 1 if "pair" in out and not out["pair"]["compatible"] else 0  # for a script: as `cmp` does
    if args.json:
        print(json.dumps(out, default=str))
        return verdict
    for role, facts in zip(("target", "draft") if len(infos) == 2 else ("model",), out["models"]):
        print(f"{role}:")
        for key, value in facts.items():
            print(f"  {key:16} {value}")
    if "pair" in out:
        v = out["pair"]
        print(f"pair: {'compatible' if v['compatible'] else 'NOT compatible'}")
        for m in [*v.get("messages", []), *v.get("warnings", [])]:
            print(f"  - {m}")
    return verdict


def cmd_models(args: argparse.Namespace) -> int:
    from edgespec.llama.config import load_config
    from edgespec.llama.models import pair_state, prepare_pair, state

    setup_logging(args.verbose)
    cfg = load_config(args.config)
    if args.action == "prepare":
        for name in args.names or ["demo"]:
            target, draft = prepare_pair(cfg, name)
            print(f"{name}: target {target}" + (f", draft {draft}" if draft else ""))
        return 0
    if args.names:
        raise EdgespecError(f"models list takes no names (to prepare pairs: edgespec models prepare {args.names[0]})")
    print(f"# {cfg.source}")
    for m in cfg.models.values():
        src = str(m.path) if m.path else m.wheel or f"{m.derive} -> {m.quantize}"
        print(f"model {m.name:22} {state(cfg, m):13} {src}")
    for p in cfg.pairs.values():
        shown = pair_state(cfg, p.name)
        print(
            f"pair  {p.name:22} {shown:13} {p.target} + {p.draft or 'prompt lookup'}"
            f" (k={'auto' if p.k is None else p.k})"
        )
    return 0


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="edgespec", description="Lossless speculative decoding for local GGUF models")
    sub = parser.add_subparsers(dest="command", required=True)
    parser.commands = sub.choices
    run = sub.add_parser("run", help="generate once and print the text and speculation stats")
    add_model_args(run)
    add_sampling_args(run)
    run.add_argument("--prompt", default="Explain in two sentences why the sky is blue.", help="text, or - for stdin")
    run.add_argument("--raw", action="store_true", help="tokenize the prompt as is (no chat template)")
    run.add_argument("--stop", action="append", help="stop string (repeatable)")
    run.add_argument("--json-schema", metavar="FILE", help="answer as JSON that follows this JSON Schema file")
    run.add_argument("--grammar", metavar="FILE", help="answer as text that follows this Lark grammar file")
    run.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    run.set_defaults(func=cmd_run)

    ins = sub.add_parser("inspect", help="facts of a GGUF file, and the verdict for a target/draft pair")
    ins.add_argument("path", metavar="PATH", help="a GGUF model (the target, when a draft follows)")
    ins.add_argument("draft", nargs="?", metavar="DRAFT", help="its draft: the pair's verdict too")
    ins.add_argument("--json", action="store_true", help="print the facts (and verdict) as one JSON object")
    ins.set_defaults(func=cmd_inspect)

    mod = sub.add_parser("models", help="list models.toml entries or prepare them")
    mod.add_argument("action", nargs="?", choices=["list", "prepare"], default="list", help="default: list")
    mod.add_argument("names", nargs="*", help="pairs to prepare (default: demo)")
    mod.add_argument("--config", help="models.toml to read (default: search, see README)")
    mod.add_argument("--verbose", action="store_true", help="llama.cpp's log (the quantizer's reasons)")
    mod.set_defaults(func=cmd_models)

    # serve, bench and chat register themselves through entry points (pyproject.toml): the
    # CLI does not import the other frontends, and this package never imports textual
    for ep in sorted(entry_points(group="edgespec.commands"), key=lambda e: e.name):
        ep.load()(sub)
    return parser


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line, as every other error (not argparse's usage block first);
    its subcommands' parsers are of this class too."""

    commands: Mapping[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"edgespec: error: {message} (see `{self.prog} --help`)\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "models" and not any(x.startswith("-") for x in extra):
        args.names = [*args.names, *extra]  # after an option (`models prepare --config F demo`): argparse's gap
    elif extra:  # the command's own help, not the top one's
        parser.commands.get(args.command, parser).error(f"unrecognized arguments: {' '.join(extra)}")
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
