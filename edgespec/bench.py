"""`edgespec bench`: side-by-side speed in one run on one machine.

Rows: (prompt, temperature) cells. Columns: llama.cpp's native plain decoding
(llama-bench) and native speculation (llama-speculative-simple, n_max 2/4/8),
both built from the llama.cpp source the pinned llama-cpp-python vendors;
edgespec with K = 0 (plain, through the same loop), fixed K = 1..8, and the
adaptive controller. Every run starts from empty caches; each figure is the
median of the repeats. Also: the acceptance of drafts at several quantizations
under the same target, and a "bad pair" (a Q2_K draft at T = 1.0) where the
adaptive controller must fall back instead of losing. Writes bench.json,
bench.md and bench.png (report in bench_report.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

PROMPTS = {
    "code": "Write a Python function that parses a CSV file and returns the average of each numeric column.",
    "story": "Write a short story about a robot who learns to paint.",
    "explanation": "Explain how vaccines train the immune system, step by step.",
}
QUANT_DRAFTS = ("smollm2-135m-q8_0", "smollm2-135m-q4_1", "smollm2-135m-q2_k")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="side-by-side benchmark against llama.cpp (writes JSON, Markdown, PNG)")
    p.add_argument("--pair", default="demo")
    p.add_argument("--bad-pair", default="demo-bad", help="pair for the fallback row ('' to skip)")
    p.add_argument("--config")
    p.add_argument("--out", default="bench-out")
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ks", default="0,1,2,3,4,5,6,7,8", help="fixed K values for edgespec")
    p.add_argument("--temps", default="0,0.8")
    p.add_argument("--prompts", default=",".join(PROMPTS))
    p.add_argument("--n-max", default="2,4,8", help="llama.cpp native speculation n_max values")
    p.add_argument("--no-native", action="store_true", help="skip llama.cpp's own binaries")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--verbose", action="store_true")
    p.set_defaults(func=cmd_bench)


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_edgespec(engine: Any, prompt: str, temp: float, k: int | None, spec: bool, n: int, repeats: int) -> dict:
    runs = []
    for r in range(repeats):
        engine.reset()
        res = engine.generate(prompt, temperature=temp, max_tokens=n, k=k, speculative=spec, seed=1234 + r)
        runs.append(res.stats.as_dict())
    return {"tokens_per_s": _median([x["tokens_per_s"] for x in runs]), "runs": runs}


def run_native_spec(
    native: Any, paths: tuple[Path, Path], text: str, temp: float, n_max: int, n: int, repeats: int, threads: int | None
) -> dict:
    runs = [
        native.run_speculative_simple(
            paths[0], paths[1], text, n_predict=n, temperature=temp, n_max=n_max, seed=1234 + r, threads=threads
        )
        for r in range(repeats)
    ]
    return {
        "tokens_per_s": _median([x["tokens_per_s"] for x in runs]),
        "acceptance": _median([x.get("acceptance", 0.0) for x in runs]),
        "runs": runs,
    }


def bench_cells(args: argparse.Namespace, engine: Any, paths: tuple[Path, Path], native: Any) -> list[dict]:
    ks = [int(k) for k in args.ks.split(",") if k != ""]
    cells = []
    for name in args.prompts.split(","):
        prompt = PROMPTS[name]
        text = engine.chat_text([{"role": "user", "content": prompt}])
        for temp in (float(t) for t in args.temps.split(",")):
            cell: dict[str, Any] = {"prompt": name, "temperature": temp, "edgespec": {}, "native_spec": {}}
            for k in ks:
                cell["edgespec"][str(k)] = run_edgespec(engine, prompt, temp, k, k > 0, args.tokens, args.repeats)
            cell["edgespec"]["adaptive"] = run_edgespec(engine, prompt, temp, None, True, args.tokens, args.repeats)
            if native is not None:
                for n_max in (int(x) for x in args.n_max.split(",")):
                    cell["native_spec"][str(n_max)] = run_native_spec(
                        native, paths, text, temp, n_max, args.tokens, args.repeats, args.threads
                    )
            _log(
                f"  {name} T={temp}: " + ", ".join(f"{k}={v['tokens_per_s']:.1f}" for k, v in cell["edgespec"].items())
            )
            cells.append(cell)
    return cells


def quant_table(args: argparse.Namespace, cfg: Any) -> list[dict]:
    """Acceptance of drafts at several quantizations under the demo target (greedy and T=0.8)."""
    from .engine import Engine
    from .models import prepare

    target = prepare(cfg, cfg.pair(args.pair).target)
    rows = []
    for name in QUANT_DRAFTS:
        if name not in cfg.models:
            continue
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
    from .engine import Engine

    out: dict[str, Any] = {"pair": args.bad_pair, "temperature": 1.0, "prompts": {}}
    with Engine.from_pair(args.bad_pair, args.config) as eng:
        for name in args.prompts.split(","):
            plain = run_edgespec(eng, PROMPTS[name], 1.0, 0, False, args.tokens, args.repeats)
            adaptive = run_edgespec(eng, PROMPTS[name], 1.0, None, True, args.tokens, args.repeats)
            fixed = run_edgespec(eng, PROMPTS[name], 1.0, 4, True, args.tokens, args.repeats)
            out["prompts"][name] = {"plain": plain, "adaptive": adaptive, "k4": fixed}
            _log(
                f"  bad pair {name}: plain {plain['tokens_per_s']:.1f}, adaptive {adaptive['tokens_per_s']:.1f}, "
                f"K=4 {fixed['tokens_per_s']:.1f}"
            )
        out["warnings"] = list(eng.warnings)
    return out


def cmd_bench(args: argparse.Namespace) -> int:
    from . import native as native_mod
    from .bench_report import write_reports
    from .cli import _logging
    from .config import load_config
    from .engine import Engine
    from .models import prepare_pair

    _logging(args.verbose)
    cfg = load_config(args.config)
    target, draft = prepare_pair(cfg, args.pair)
    assert draft is not None, "the bench needs a pair with a draft"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
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
            target, n_gen=args.tokens, threads=args.threads, repeats=args.repeats
        )
    with Engine.load(target, draft, n_ctx=2048, threads=args.threads) as engine:
        result["threads"] = engine.info().get("threads")
        result["cells"] = bench_cells(args, engine, (target, draft), native)
    result["quantization"] = quant_table(args, cfg)
    result["bad_pair"] = bad_pair(args)
    (out / "bench.json").write_text(json.dumps(result, indent=1, default=str))
    write_reports(result, out)
    print((out / "bench.md").read_text())
    return 0
