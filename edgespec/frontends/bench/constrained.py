"""What a constraint costs: tokens per second with a JSON schema or a forced tool call
against unconstrained generation, on the same engine at the same fixed K.

The three kinds of request run interleaved (free, schema, tool, free, ...) so the
machine's drift hits them alike, greedy and at T=0.8 with a fixed seed, from a
fresh context each time. The figure is the decode phase's tokens per second (the
engine's own `tokens_per_s`: after prefill, so compiling the grammar and building
its tokenizer, once per engine, are left out), with the acceptance rate beside it;
medians over `--repeats`. The ratios are constrained / free.

    python -m edgespec.frontends.bench.constrained [--repeats 5] [--max-tokens 160] [--k 4]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from typing import Any

from edgespec import Engine

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "country": {"type": "string", "maxLength": 40},
        "population": {"type": "integer", "minimum": 0, "maximum": 100000000},
        "sights": {"type": "array", "maxItems": 4, "items": {"type": "string", "maxLength": 40}},
    },
    "required": ["name", "country", "population", "sights"],
    "additionalProperties": False,
}
TOOL = {
    "type": "function",
    "function": {
        "name": "plan_visit",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}, "days": {"type": "integer", "maximum": 30}},
            "required": ["city", "days"],
        },
    },
}
PROMPT = [{"role": "user", "content": "Tell me about Paris: its name, country, population and main sights."}]


def _once(engine: Engine, kind: str, temperature: float, max_tokens: int, k: int) -> tuple[float, float]:
    options: dict[str, Any] = {"temperature": temperature, "seed": 1, "max_tokens": max_tokens, "k": k}
    if kind == "schema":
        options["json_schema"] = SCHEMA
    elif kind == "tool":
        options["tools"] = engine.tools([TOOL], "required")
    engine.reset()
    stats = engine.generate(PROMPT, **options).stats
    return stats.tokens_per_s, stats.acceptance_rate


def compare(engine: Engine, repeats: int, max_tokens: int, k: int) -> dict[str, dict[str, float]]:
    kinds = ("free", "schema", "tool")
    runs: dict[tuple[str, float], list[tuple[float, float]]] = {}
    for kind in kinds:  # warm-up: the grammar tokenizer, the buffers
        _once(engine, kind, 0.0, 16, k)
    for r in range(repeats):
        for temperature in (0.0, 0.8):
            for kind in kinds:
                runs.setdefault((kind, temperature), []).append(_once(engine, kind, temperature, max_tokens, k))
        print(f"repeat {r + 1}/{repeats} done", flush=True)
    out: dict[str, dict[str, float]] = {}
    for (kind, temperature), xs in runs.items():
        out[f"{kind} T={temperature:g}"] = {
            "tokens_per_s": statistics.median(x[0] for x in xs),
            "acceptance": statistics.median(x[1] for x in xs),
        }
    for temperature in (0.0, 0.8):
        free = out[f"free T={temperature:g}"]["tokens_per_s"]
        for kind in kinds[1:]:
            row = out[f"{kind} T={temperature:g}"]
            row["ratio"] = row["tokens_per_s"] / free
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m edgespec.frontends.bench.constrained", description=__doc__)
    p.add_argument("--pair", default="demo")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--k", type=int, default=4, help="the fixed draft length for every request")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    with Engine.from_pair(args.pair, threads=args.threads) as engine:
        table = compare(engine, args.repeats, args.max_tokens, args.k)
    print("\n| request | tokens/s (median) | acceptance | vs free |\n|---|---|---|---|")
    for name, row in table.items():
        ratio = f"{row['ratio']:.2f}x" if "ratio" in row else "-"
        print(f"| {name} | {row['tokens_per_s']:.1f} | {row['acceptance']:.2f} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
