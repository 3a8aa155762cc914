"""The GPU check (README.md beside this): both models offload, greedy speculation equals plain
decoding, what each mode gains, and a target and a draft pass per batch size.

    REPS=2 NGLS=99,0 python3 check.py TARGET.gguf DRAFT.gguf    # one JSON line per configuration

A scratch tool: it reaches into the engine's decoder for the per-batch timings, as tests do.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

from edgespec import Engine  # first: llama.cpp's libraries load before numpy (edgespec/__init__.py)

REPS = int(os.environ.get("REPS", "3"))
NGLS = [int(x) for x in os.environ.get("NGLS", "0,99").split(",")]
PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a docstring."


def pass_times(model, held: int, sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32)) -> dict[int, float]:
    """Median ms of one pass over n tokens after the `held` the cache holds, taken back each time."""
    out = {}
    for n in sizes:
        ts = []
        for _ in range(7):
            t0 = time.perf_counter()
            model.eval([100 + i for i in range(n)], held, 0)
            ts.append(time.perf_counter() - t0)
            model.trim(held)
        out[n] = round(statistics.median(ts) * 1000, 3)
    return out


def speeds(eng: Engine, temp: float) -> dict:
    plain, spec, last = [], [], None
    for seed in range(REPS):
        eng.reset()
        plain.append(eng.generate(PROMPT, temperature=temp, max_tokens=128, speculative=False, seed=seed))
        eng.reset()
        last = eng.generate(PROMPT, temperature=temp, max_tokens=128, seed=seed).stats
        spec.append(last.tokens_per_s)
    p = statistics.median(r.stats.tokens_per_s for r in plain)
    s = statistics.median(spec)
    return {
        "plain": round(p, 1),
        "spec": round(s, 1),
        "ratio": round(s / p, 3),
        "steps": last.steps,
        "drafted": last.n_drafted,
        "accepted": last.n_accepted,
        "sources": last.sources,
        "k_last": last.k,
        "draft_s": round(last.draft_s, 3),
        "verify_s": round(last.verify_s, 3),
        "decode_s": round(last.decode_s, 3),
    }


def main() -> None:
    target, draft = sys.argv[1], sys.argv[2]
    for ngl in NGLS:
        for lookup in (False, True):
            t0 = time.perf_counter()
            eng = Engine.load(target, draft, n_ctx=2048, n_gpu_layers=ngl, lookup=lookup)
            row = {"load_s": round(time.perf_counter() - t0, 2), "gpu": str(eng.info().gpu)}
            plain = eng.generate(PROMPT, temperature=0, max_tokens=128, speculative=False)
            eng.reset()
            spec = eng.generate(PROMPT, temperature=0, max_tokens=128)
            row["greedy_identical"] = plain.tokens == spec.tokens
            for temp in (0.0, 0.8):
                row[f"T{temp}"] = speeds(eng, temp)
            dec = eng._decoder
            row["target_ms_by_n"] = pass_times(dec.target.model, len(dec.target.tokens))
            if dec.draft is not None:
                row["draft_ms_by_n"] = pass_times(dec.draft.model, len(dec.draft.tokens))
            print(json.dumps({f"ngl={ngl} lookup={lookup}": row}), flush=True)
            eng.close()


if __name__ == "__main__":
    main()
