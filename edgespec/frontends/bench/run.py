"""`edgespec bench`: side-by-side speed in one run on one machine.

Rows: (prompt, temperature) cells. Columns: llama.cpp's native plain decoding
(llama-bench, run in every cell's rounds too, so a machine that drifts over the
half hour moves it with the rest) and native speculation (llama-speculative-simple, n_max 2/4/8),
both built from the llama.cpp source the pinned llama-cpp-python vendors;
edgespec with K = 0 (plain, through the same loop), fixed K = 1..8, 10, 12, 16, and the
adaptive controller (prompt lookup off in these cells, as fixed K has it). Every run starts
from empty KV caches; the adaptive controller keeps what it measured from run to run (step costs, acceptance per
temperature), as it does in a running chat or server, so only the first
adaptive run of the bench pays its warm-up. Each figure is the median of the
repeats. Also: the acceptance of drafts at several quantizations
under the same target, and a "bad pair" (a Q2_K draft at T = 1.0) where the
adaptive controller must fall back instead of losing. Writes bench.json,
bench.md and bench.png (report in report.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from edgespec import EdgespecError, Engine
from edgespec.core import defaults

from .copying import PROMPTS as COPYING_PROMPTS
from .copying import lookup_cells
from .native import attempt
from .sim_bench import check_counts, check_ks
from .simulate import MACHINES, PROFILES, TEXTS

PROMPTS = {
    "code": "Write a Python function that parses a CSV file and returns the average of each numeric column.",
    "story": "Write a short story about a robot who learns to paint.",
    "explanation": "Explain how vaccines train the immune system, step by step.",
}
P_MIN_VALUES = (0.0, 0.3, 0.6)
QUANT_DRAFTS = ("smollm2-135m-q8_0", "smollm2-135m-q4_1", "smollm2-135m-q2_k")
LOOKUP_PROMPTS = tuple(COPYING_PROMPTS)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="side-by-side benchmark against llama.cpp (writes JSON, Markdown, PNG)")
    p.add_argument("--pair", default="demo")
    p.add_argument("--bad-pair", default="demo-bad", help="pair for the fallback row ('' to skip)")
    p.add_argument("--config")
    p.add_argument("--out", default="bench-out", help="folder for bench.json, .md, .png (default %(default)s)")
    p.add_argument("--tokens", type=int, default=256, help="tokens per run (default %(default)s)")
    p.add_argument("--repeats", type=int, default=3, help="runs per cell, medians (default %(default)s)")
    p.add_argument("--ks", default=None, help="fixed K values (default 0..8, 10, 12, 16; simulated: 0..16)")
    p.add_argument("--temps", default="0,0.8", help="temperatures (default %(default)s)")
    p.add_argument("--prompts", default=",".join(PROMPTS))
    p.add_argument("--n-max", default="2,4,8", help="llama.cpp native speculation n_max values (default %(default)s)")
    p.add_argument(
        "--quant-drafts", default=",".join(QUANT_DRAFTS), help="drafts for the acceptance table ('' to skip)"
    )
    p.add_argument("--no-p-min", action="store_true", help="skip the fixed p_min rows")
    p.add_argument("--no-native", action="store_true", help="skip llama.cpp's own binaries")
    p.add_argument(
        "--lookup-prompts",
        default=",".join(LOOKUP_PROMPTS),
        help="prompts of the prompt-lookup section ('' to skip it)",
    )
    p.add_argument("--only-lookup", action="store_true", help="run the prompt-lookup section only")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--simulate", action="store_true", help="simulated machines instead of models (no llama.cpp)")
    p.add_argument("--machines", default=",".join(m.name for m in MACHINES), help="--simulate: machines, or seedN")
    p.add_argument("--profiles", default=",".join(PROFILES), help="--simulate: acceptance profiles")
    p.add_argument("--texts", type=int, default=TEXTS, help="--simulate: texts per round (one is one draw of luck)")
    p.add_argument("--virtual-clock", action="store_true",
                   help="--simulate: time steps on the simulation's clock (decisions only, deterministic)")  # fmt: skip
    p.set_defaults(func=cmd_bench)


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _edgespec_once(engine: Any, prompt: str, temp: float, k: int | None, spec: bool, n: int, seed: int) -> dict:
    engine.reset()
    res = engine.generate(prompt, temperature=temp, max_tokens=n, k=k, speculative=spec, seed=seed)
    return res.stats.as_dict()


def _summary(runs: list[dict]) -> dict:
    out = {"tokens_per_s": _median([x["tokens_per_s"] for x in runs]), "runs": runs}
    if runs and "acceptance" in runs[0]:
        out["acceptance"] = _median([x.get("acceptance", 0.0) for x in runs])
    return out


def bench_cells(args: argparse.Namespace, engine: Any, paths: tuple[Path, Path], native: Any) -> list[dict]:
    """Every column of a cell once per round, the rounds one after another: a slow minute on
    a shared machine then touches one run of many columns, not all runs of one column."""
    ks = [int(k) for k in _names(args.ks)]
    n_maxes = [int(x) for x in _names(args.n_max)] if native is not None else []
    cells = []
    for name in _names(args.prompts):
        prompt = PROMPTS[name]
        text = engine.chat_text([{"role": "user", "content": prompt}])
        for temp in (float(t) for t in _names(args.temps)):
            runs: dict[tuple[str, str], list[dict]] = {}
            failed: set[tuple[str, str]] = set()  # llama.cpp columns that failed in this cell
            for r in range(args.repeats):
                seed = 1234 + r
                for k in ks:
                    one = _edgespec_once(engine, prompt, temp, k, k > 0, args.tokens, seed)
                    runs.setdefault(("edgespec", str(k)), []).append(one)
                one = _edgespec_once(engine, prompt, temp, None, True, args.tokens, seed)
                runs.setdefault(("edgespec", "adaptive"), []).append(one)
                columns = []
                if native is not None:
                    bench = partial(
                        native.run_llama_bench, paths[0], n_gen=args.tokens, threads=args.threads, repeats=1
                    )
                    columns.append((("native_plain", ""), bench))
                for n_max in n_maxes:
                    spec = partial(
                        native.run_speculative_simple, paths[0], paths[1], text, n_predict=args.tokens,
                        temperature=temp, n_max=n_max, seed=seed, threads=args.threads,
                    )  # fmt: skip
                    columns.append((("native_spec", str(n_max)), spec))
                for column, run in columns:
                    attempt(runs, failed, column, run)  # a failed run: the column goes without it
            cell: dict[str, Any] = {"prompt": name, "temperature": temp, "edgespec": {}, "native_spec": {}}
            for (kind, key), xs in runs.items():
                if kind == "native_plain":
                    cell[kind] = _summary(xs)  # measured in the same rounds as the rest of the cell
                else:
                    cell[kind][key] = _summary(xs)
            _log(
                f"  {name} T={temp}: " + ", ".join(f"{k}={v['tokens_per_s']:.1f}" for k, v in cell["edgespec"].items())
            )
            cells.append(cell)
    return cells


def p_min_table(args: argparse.Namespace, engine: Any) -> list[dict]:
    """A fixed p_min (stop drafting before a token when the draft's row is less sure than
    p_min) at fixed K = 8 on one prompt: the bench's evidence for the pair option's default."""
    rows = []
    for temp in (float(t) for t in _names(args.temps)):
        runs: dict[float, list[dict]] = {v: [] for v in P_MIN_VALUES}
        try:
            for r in range(args.repeats):
                for v in P_MIN_VALUES:
                    engine.p_min = v
                    runs[v].append(_edgespec_once(engine, PROMPTS["story"], temp, 8, True, args.tokens, 1234 + r))
        finally:
            engine.p_min = 0.0
        row: dict[str, Any] = {"prompt": "story", "temperature": temp, "k": 8}
        row["p_min"] = {str(v): _summary(xs) for v, xs in runs.items()}
        rows.append(row)
        _log(f"  p_min T={temp}: " + ", ".join(f"{v}={x['tokens_per_s']:.1f}" for v, x in row["p_min"].items()))
    return rows


def quant_table(args: argparse.Namespace, cfg: Any) -> list[dict]:
    """Acceptance of drafts at several quantizations under the demo target (greedy and T=0.8)."""
    from edgespec.llama.models import prepare

    target = prepare(cfg, cfg.pair(args.pair).target)
    rows = []
    for name in _names(args.quant_drafts):
        draft = prepare(cfg, name)
        with Engine.load(target, draft, n_ctx=2048, threads=args.threads) as eng:
            row: dict[str, Any] = {"draft": name, "warnings": list(eng.warnings)}
            for temp in (0.0, 0.8):
                res = eng.generate(PROMPTS["explanation"], temperature=temp, max_tokens=128, k=4, seed=7)
                row[f"acceptance_T{temp}"] = round(res.stats.acceptance_rate, 3)
            rows.append(row)
        _log(f"  quant {name}: {row}")
    return rows


def bad_pair(args: argparse.Namespace) -> dict | None:
    if not args.bad_pair:
        return None
    out: dict[str, Any] = {"pair": args.bad_pair, "temperature": 1.0, "prompts": {}}
    with Engine.from_pair(args.bad_pair, args.config, lookup=False) as eng:  # the controller's fallback alone
        for name in _names(args.prompts):
            runs: dict[str, list[dict]] = {"plain": [], "adaptive": [], "k4": []}
            for r in range(args.repeats):  # interleaved, as in bench_cells
                for key, k in (("plain", 0), ("adaptive", None), ("k4", 4)):
                    runs[key].append(_edgespec_once(eng, PROMPTS[name], 1.0, k, k != 0, args.tokens, 1234 + r))
            plain, adaptive, fixed = (_summary(runs[key]) for key in ("plain", "adaptive", "k4"))
            out["prompts"][name] = {"plain": plain, "adaptive": adaptive, "k4": fixed}
            _log(
                f"  bad pair {name}: plain {plain['tokens_per_s']:.1f}, adaptive {adaptive['tokens_per_s']:.1f}, "
                f"K=4 {fixed['tokens_per_s']:.1f}"
            )
        out["warnings"] = list(eng.warnings)
    return out


def _names(csv: str) -> list[str]:
    return [x for x in csv.split(",") if x]


def _check_args(args: argparse.Namespace, cfg: Any) -> None:
    """Refuse a bad option before half an hour of runs, not after."""
    for name in _names(args.prompts):
        if name not in PROMPTS:
            raise EdgespecError(f"no bench prompt named {name!r} (--prompts); known: {', '.join(PROMPTS)}")
    for name in _names(args.lookup_prompts):
        if name not in COPYING_PROMPTS:
            known = ", ".join(COPYING_PROMPTS)
            raise EdgespecError(f"no lookup prompt named {name!r} (--lookup-prompts); known: {known}")
    for name in _names(args.quant_drafts):
        if name not in cfg.models:
            raise EdgespecError(f"no model named {name!r} in {cfg.source} (--quant-drafts; '' skips the table)")
    if cfg.pair(args.pair).draft is None:
        raise EdgespecError(f"pair {args.pair!r} has no draft model; the bench needs one (--pair)")
    if args.bad_pair and cfg.pair(args.bad_pair).draft is None:
        raise EdgespecError(f"pair {args.bad_pair!r} has no draft model (--bad-pair; '' skips that row)")
    check_ks(args.ks, plain=True)
    for option, csv, kind in (("--temps", args.temps, float), ("--n-max", args.n_max, int)):
        try:
            values = [kind(x) for x in _names(csv)]
        except ValueError:
            raise EdgespecError(f"{option} takes comma-separated numbers, not {csv!r}") from None
        if not all(0 <= v < float("inf") for v in values):
            raise EdgespecError(f"{option} values must be finite and >= 0")
    if any(not 1 <= n <= defaults.K_LIMIT for n in (int(x) for x in _names(args.n_max))):
        raise EdgespecError(f"--n-max values must be between 1 and {defaults.K_LIMIT}")
    check_counts(args)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / ".write-check").touch()
        (out / ".write-check").unlink()
    except OSError as err:
        raise EdgespecError(
            f"cannot write the reports to {out} ({(err.strerror or str(err)).lower()}); pick another --out"
        ) from None


def _check_drafts(args: argparse.Namespace, cfg: Any, target: Path) -> None:
    """The acceptance table's drafts and the bad pair, prepared and checked against their
    targets before the cells run (a draft that cannot pair failed after the whole run)."""
    from edgespec.llama.gguf_file import read_gguf
    from edgespec.llama.models import prepare, prepare_pair
    from edgespec.llama.pair import check_tokenizers

    t_info = read_gguf(target)
    for name in _names(args.quant_drafts):
        try:
            check_tokenizers(t_info, read_gguf(prepare(cfg, name)))
        except EdgespecError as err:
            raise EdgespecError(f"--quant-drafts {name}: {err}") from None
    if args.bad_pair:
        bad_target, bad_draft = prepare_pair(cfg, args.bad_pair)
        assert bad_draft is not None  # _check_args
        check_tokenizers(read_gguf(bad_target), read_gguf(bad_draft))


def cmd_bench(args: argparse.Namespace) -> int:
    from edgespec.frontends.options import setup_logging
    from edgespec.llama.config import load_config
    from edgespec.llama.models import prepare_pair

    from . import native as native_mod
    from .report import write_reports

    setup_logging(args.verbose)
    if args.simulate:
        from .sim_bench import cmd_simulate

        return cmd_simulate(args)
    args.ks = args.ks or "0,1,2,3,4,5,6,7,8,10,12,16"
    cfg = load_config(args.config)
    _check_args(args, cfg)
    target, draft = prepare_pair(cfg, args.pair)
    assert draft is not None  # _check_args
    if not args.only_lookup:
        _check_drafts(args, cfg, target)
    out = Path(args.out)
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "pair": args.pair,
        "tokens": args.tokens,
        "repeats": args.repeats,
        "native_plain": None,
    }
    native = None
    if not args.no_native:
        native_mod.build_native(progress=_log)
        native = native_mod
        _log("llama.cpp native plain decoding (llama-bench) ...")
        result["native_plain"] = native.run_llama_bench(
            target,
            n_gen=args.tokens,
            threads=args.threads,
            repeats=1,  # the cells run it again, interleaved
        )

    def save() -> None:  # each section kept as it ends: a later failure loses only what was running
        (out / "bench.json").write_text(json.dumps(result, indent=1, default=str))

    if args.lookup_prompts:
        result["lookup"] = lookup_cells(
            (target, draft),
            temps=[float(t) for t in _names(args.temps)],
            prompts=_names(args.lookup_prompts),
            tokens=args.tokens,
            repeats=args.repeats,
            native=native,
            threads=args.threads,
            log=_log,
        )
        save()
    if not args.only_lookup:
        # prompt lookup off: FixedK drafts from the model alone, so adaptive does too (the K
        # controller judged against fixed K; the hybrid has the prompt-lookup section)
        with Engine.load(target, draft, n_ctx=2048, threads=args.threads, lookup=False) as engine:
            result["threads"] = engine.info().threads
            result["cells"] = bench_cells(args, engine, (target, draft), native)
            save()
            result["p_min"] = [] if args.no_p_min else p_min_table(args, engine)
        result["quantization"] = quant_table(args, cfg)
        result["bad_pair"] = bad_pair(args)
    save()
    write_reports(result, out)
    print((out / "bench.md").read_text())
    return 0
