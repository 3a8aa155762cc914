"""The `edgespec` command: run, inspect, models, bench, chat, serve.

Every error a user can cause is an EdgespecError: it is printed as one line on
stderr and the command exits with code 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any

from .errors import EdgespecError

log = logging.getLogger("edgespec")


def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--pair", help="a pair from models.toml (default: demo)")
    g.add_argument("--target", help="path to the target GGUF (instead of --pair)")
    g.add_argument("--draft", help="path to the draft GGUF (with --target)")
    g.add_argument("--config", help="models.toml to read (default: search, see README)")
    g.add_argument("--n-ctx", type=int, default=None, help="context size (default 4096)")
    g.add_argument("--n-gpu-layers", type=int, default=None, help="target layers to offload to the GPU")
    g.add_argument("--draft-n-gpu-layers", type=int, default=None, help="draft layers to offload")
    g.add_argument("--threads", type=int, default=None, help="CPU threads (default: physical cores)")
    g.add_argument("--verbose", action="store_true", help="show llama.cpp's log")


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--max-tokens", type=int, default=256)
    g.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=40)
    g.add_argument("--top-p", type=float, default=0.95)
    g.add_argument("--min-p", type=float, default=0.05)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--k", type=int, default=None, help="fixed number of draft tokens (default: adaptive)")
    g.add_argument("--no-spec", action="store_true", help="plain decoding, no draft model")


def sampling_options(args: argparse.Namespace) -> dict[str, Any]:
    return dict(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        seed=args.seed,
        k=args.k,
        speculative=not args.no_spec,
    )


def engine_from_args(args: argparse.Namespace, progress: Callable[[str], None] | None = None):  # noqa: ANN201
    """Load the engine a command's model options describe (also used by chat and serve)."""
    from .config import load_config
    from .engine import Engine
    from .models import prepare_pair

    _logging(args.verbose)
    if args.target is None and args.draft is not None:
        raise EdgespecError("--draft needs --target (or use --pair NAME)")
    if args.target is not None:
        if args.pair is not None:
            raise EdgespecError("give either --pair or --target/--draft, not both")
        draft = None if args.no_spec else args.draft
        return Engine.load(
            args.target,
            draft,
            n_ctx=args.n_ctx or 4096,
            n_gpu_layers=args.n_gpu_layers or 0,
            draft_n_gpu_layers=args.draft_n_gpu_layers,
            threads=args.threads,
            k=args.k,
        )
    cfg = load_config(args.config)
    name = args.pair or "demo"
    pair = cfg.pair(name)
    target, draft = prepare_pair(cfg, name, **({"progress": progress} if progress else {}))
    t, d = cfg.model(pair.target), cfg.model(pair.draft) if pair.draft else None
    return Engine.load(
        target,
        None if args.no_spec else draft,
        n_ctx=args.n_ctx or pair.n_ctx,
        n_gpu_layers=t.n_gpu_layers if args.n_gpu_layers is None else args.n_gpu_layers,
        draft_n_gpu_layers=(d.n_gpu_layers if d else None)
        if args.draft_n_gpu_layers is None
        else args.draft_n_gpu_layers,
        threads=args.threads or t.threads,
        k=args.k if args.k is not None else pair.k,
        p_min=pair.p_min,
        name=name,
    )


def _logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(name)s: %(message)s")
    if not verbose:
        logging.getLogger("edgespec.llama").setLevel(logging.ERROR)
        logging.getLogger("edgespec").setLevel(logging.ERROR)  # warnings are printed by the commands


def format_stats(stats: Any) -> str:
    s = stats
    line = (
        f"{s.n_generated} tokens in {s.decode_s:.2f}s = {s.tokens_per_s:.1f} tok/s (prefill {s.n_prefilled} "
        f"tokens {s.prefill_s:.2f}s)"
    )
    if s.speculative:
        line += (
            f" | drafted {s.n_drafted}, accepted {s.n_accepted} ({100 * s.acceptance_rate:.0f}%), "
            f"{s.tokens_per_step:.2f} tokens/step, K={s.k}"
        )
    line += f" | time: draft {s.draft_s:.2f}s, verify {s.verify_s:.2f}s, python {s.python_s:.2f}s"
    return line


def cmd_run(args: argparse.Namespace) -> int:
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    engine = engine_from_args(args)
    shown = list(engine.warnings)
    for w in shown:
        print(f"warning: {w}", file=sys.stderr)
    opts = sampling_options(args)
    if args.stop:
        opts["stop"] = args.stop
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
    for event in engine.stream(prompt, raw=args.raw, **opts):
        sys.stdout.write(event.text)
        sys.stdout.flush()
    sys.stdout.write("\n")
    if event is not None:
        print(f"[{event.finish_reason}] {format_stats(event.stats)}", file=sys.stderr)
    for w in engine.warnings:
        if w not in shown:  # e.g. the measured verdict on a low-bit draft
            print(f"warning: {w}", file=sys.stderr)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from .gguf_file import describe, read_gguf
    from .pair import pair_verdict

    infos = [read_gguf(p) for p in args.paths]
    out: dict[str, Any] = {"models": [describe(i) for i in infos]}
    if len(infos) == 2:
        out["pair"] = pair_verdict(infos[0], infos[1])
    if args.json:
        print(json.dumps(out, default=str))
        return 0
    for role, facts in zip(("target", "draft") if len(infos) == 2 else ("model",), out["models"]):
        print(f"{role}:")
        for key, value in facts.items():
            print(f"  {key:16} {value}")
    if "pair" in out:
        v = out["pair"]
        print(f"pair: {'compatible' if v['compatible'] else 'NOT compatible'}")
        for m in [*v.get("messages", []), *v.get("warnings", [])]:
            print(f"  - {m}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from .config import load_config
    from .models import is_ready, prepare_pair

    cfg = load_config(args.config)
    if args.action == "prepare":
        for name in args.names or ["demo"]:
            target, draft = prepare_pair(cfg, name)
            print(f"{name}: target {target}" + (f", draft {draft}" if draft else ""))
        return 0
    print(f"# {cfg.source}")
    for m in cfg.models.values():
        src = str(m.path) if m.path else m.wheel or f"{m.derive} -> {m.quantize}"
        print(f"model {m.name:22} {'ready' if is_ready(m) else 'not prepared':13} {src}")
    for p in cfg.pairs.values():
        ready = is_ready(cfg.model(p.target)) and (p.draft is None or is_ready(cfg.model(p.draft)))
        print(
            f"pair  {p.name:22} {'ready' if ready else 'not prepared':13} {p.target} + {p.draft}"
            f" (k={'auto' if p.k is None else p.k})"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edgespec", description="Lossless speculative decoding for local GGUF models")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="generate once and print the text and speculation stats")
    add_model_args(run)
    add_sampling_args(run)
    run.add_argument("--prompt", default="Explain in two sentences why the sky is blue.", help="text, or - for stdin")
    run.add_argument("--raw", action="store_true", help="tokenize the prompt as is (no chat template)")
    run.add_argument("--stop", action="append", help="stop string (repeatable)")
    run.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    run.set_defaults(func=cmd_run)

    ins = sub.add_parser("inspect", help="facts of a GGUF file, and the verdict for a target/draft pair")
    ins.add_argument("paths", nargs="+", metavar="PATH")
    ins.add_argument("--json", action="store_true")
    ins.set_defaults(func=cmd_inspect)

    mod = sub.add_parser("models", help="list models.toml entries or prepare them")
    mod.add_argument("action", choices=["list", "prepare"])
    mod.add_argument("names", nargs="*", help="pairs to prepare (default: demo)")
    mod.add_argument("--config")
    mod.set_defaults(func=cmd_models)

    from .bench import add_parser as add_bench
    from .server import add_parser as add_serve

    add_bench(sub)
    add_serve(sub)
    # `edgespec chat` comes from the edgespec_tui package through an entry point, so that
    # this package never imports textual itself.
    for ep in entry_points(group="edgespec.commands"):
        ep.load()(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "command", None) == "inspect" and len(args.paths) > 2:
        parser.error("inspect takes one or two paths")
    try:
        return int(args.func(args) or 0)
    except EdgespecError as err:
        print(f"edgespec: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("edgespec: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
