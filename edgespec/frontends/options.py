"""What every frontend shares: the model and sampling options, loading an engine from them,
logging, and the one-line stats summary.

The CLI's `run`, `edgespec serve`, `edgespec chat` and the bench all read their
options through here; every default comes from `edgespec.defaults`. Nothing
here imports another frontend.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from edgespec import EdgespecError, Engine, Stats, defaults
from edgespec.api.checks import check_options


def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--pair", help="a pair from models.toml (default: demo)")
    g.add_argument("--target", help="path to the target GGUF (instead of --pair)")
    g.add_argument("--draft", help="path to the draft GGUF (with --target; without one, prompt lookup drafts alone)")
    g.add_argument("--no-lookup", action="store_true", help="no prompt-lookup drafts (model drafts only)")
    g.add_argument(
        "--whole-rows", action="store_true", help="read whole logits rows even from a GPU (no backend top-k)"
    )
    g.add_argument("--config", help="models.toml to read (default: search, see README)")
    g.add_argument("--n-ctx", type=int, default=None, help=f"context size (default {defaults.N_CTX})")
    g.add_argument("--n-gpu-layers", type=int, default=None, help="target layers to offload to the GPU (-1: all)")
    g.add_argument("--draft-n-gpu-layers", type=int, default=None, help="draft layers to offload")
    g.add_argument("--threads", type=int, default=None, help="CPU threads (default: physical cores)")
    g.add_argument(
        "--rpc",
        default=None,
        metavar="HOST:PORT[,...]",
        help="place the target's layers on these rpc-servers (`edgespec rpc-server` there); the draft stays here",
    )
    g.add_argument("--verbose", action="store_true", help="show llama.cpp's log")


def add_isolation_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--in-process",
        action="store_true",
        help="run the models in this process (default: a child process that restarts after a crash)",
    )


def add_sampling_args(p: argparse.ArgumentParser, max_tokens: int | None = defaults.MAX_TOKENS) -> None:
    """Sampling options; `max_tokens` None: an answer runs until it ends (or the context does)."""
    g = p.add_argument_group("sampling")
    until = "default: until the answer or the context ends"
    g.add_argument(
        "--max-tokens",
        type=int,
        default=max_tokens,
        help="tokens an answer may have at most (" + ("default %(default)s" if max_tokens else until) + ")",
    )
    g.add_argument("--temperature", type=float, default=defaults.TEMPERATURE, help="0 = greedy (default %(default)s)")
    g.add_argument("--top-k", type=int, default=defaults.TOP_K, help="0 = off (default %(default)s)")
    g.add_argument("--top-p", type=float, default=defaults.TOP_P, help="1 = off (default %(default)s)")
    g.add_argument("--min-p", type=float, default=defaults.MIN_P, help="0 = off (default %(default)s)")
    g.add_argument(
        "--seed", type=int, default=None, help="reproducible sampling: the answer plain decoding gives for this seed"
    )
    g.add_argument(
        "--presence-penalty",
        type=float,
        default=defaults.PRESENCE_PENALTY,
        help="-2..2: lower the logits of tokens already generated (OpenAI's; default %(default)s)",
    )
    g.add_argument(
        "--frequency-penalty",
        type=float,
        default=defaults.FREQUENCY_PENALTY,
        help="-2..2: lower the logits of generated tokens by how often they appeared (OpenAI's; default %(default)s)",
    )
    g.add_argument(
        "--repeat-penalty",
        type=float,
        default=defaults.REPEAT_PENALTY,
        help="llama.cpp's: penalise the last --repeat-last-n tokens of the context (1 = off; default %(default)s)",
    )
    g.add_argument(
        "--repeat-last-n",
        type=int,
        default=defaults.REPEAT_LAST_N,
        help="the window of --repeat-penalty (-1: the whole context; default %(default)s)",
    )
    g.add_argument("--k", type=int, default=None, help="fixed number of draft tokens (default: adaptive)")
    g.add_argument("--no-spec", action="store_true", help="plain decoding, no draft model")


def sampling_options(args: argparse.Namespace) -> dict[str, Any]:
    """`Engine.stream` keywords from the sampling options."""
    return dict(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        seed=args.seed,
        k=args.k,
        speculative=not args.no_spec,
        presence_penalty=args.presence_penalty,
        frequency_penalty=args.frequency_penalty,
        repeat_penalty=args.repeat_penalty,
        repeat_last_n=args.repeat_last_n,
    )


def engine_from_args(
    args: argparse.Namespace, progress: Callable[[str], None] | None = None, *, isolated: bool = False
) -> Engine:
    """Load the engine a command's model options describe (`isolated`: in a child process);
    its sampling options are checked first, not after minutes of loading."""
    setup_logging(args.verbose)
    if hasattr(args, "temperature"):
        check_options(**sampling_options(args))
    if args.target is None and args.draft is not None:
        raise EdgespecError("--draft needs --target (or use --pair NAME)")
    if args.no_spec and args.k:  # --k 0 is --no-spec's own meaning
        raise EdgespecError("give either --no-spec or --k, not both (--no-spec is plain decoding: K = 0)")
    if args.target is not None:
        if args.pair is not None:
            raise EdgespecError("give either --pair or --target/--draft, not both")
        return Engine.load(
            args.target,
            None if args.no_spec else args.draft,
            n_ctx=defaults.N_CTX if args.n_ctx is None else args.n_ctx,
            n_gpu_layers=args.n_gpu_layers or 0,
            draft_n_gpu_layers=args.draft_n_gpu_layers,
            threads=args.threads,
            k=args.k,
            lookup=not args.no_lookup,
            isolated=isolated,
            rpc=() if args.rpc is None else args.rpc,
            heads=not args.whole_rows,
        )
    return Engine.from_pair(
        args.pair or "demo",
        args.config,
        with_draft=not args.no_spec,
        isolated=isolated,
        progress=progress,
        n_ctx=args.n_ctx,
        n_gpu_layers=args.n_gpu_layers,
        draft_n_gpu_layers=args.draft_n_gpu_layers,
        threads=args.threads,
        k=args.k,
        lookup=False if args.no_lookup else None,
        rpc=args.rpc,
        heads=False if args.whole_rows else None,
    )


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(name)s: %(message)s")
    if not verbose:
        logging.getLogger("edgespec.llama").setLevel(logging.ERROR)
        logging.getLogger("edgespec").setLevel(logging.ERROR)  # warnings are printed by the commands


def format_stats(s: Stats) -> str:
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


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command; a user's error is one line on stderr and exit code 2."""
    for name in ("stdin", "stdout", "stderr"):
        if getattr(sys, name) is None:  # started with it closed (`2>&-`): print(file=None) wrote to stdout
            setattr(sys, name, open(os.devnull, "r" if name == "stdin" else "w"))
        elif name != "stdin" and hasattr(stream := getattr(sys, name), "reconfigure"):
            stream.reconfigure(errors="replace")  # a character the terminal's encoding lacks: "?", not a traceback
    try:
        return int(args.func(args) or 0)
    except EdgespecError as err:
        print(f"edgespec: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("edgespec: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of the output left (`edgespec inspect m.gguf | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 141  # as a shell reports SIGPIPE
    except OSError as err:  # the system's, not the user's: writing the output to a full disk (`> /dev/full`)
        if getattr(args, "verbose", False):
            raise  # where it came from, for a report
        with contextlib.suppress(OSError, ValueError):  # (a stdout that is no file: nothing to quiet)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (the output's own, at exit)
        where = f" ({err.filename})" if err.filename else ""
        print(f"edgespec: error: {err.strerror or err}{where}", file=sys.stderr)
        return 1
