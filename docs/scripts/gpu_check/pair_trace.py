"""Why the adaptive controller chose what it chose on the device's pair (pair_check.py's
companion): every step of a few adaptive generations (its plan, then what happened), what it
had learnt after each (the step-cost curve, acceptance per position, expected speeds), the
same steps of fixed K = 2 and plain decoding beside them, and where greedy speculation first
left plain decoding's text, with the target's logits there read one token at a time and in
one batch.

    python3 pair_trace.py TARGET.gguf DRAFT.gguf     # one JSON line per part

A scratch tool: it wraps the controllers' methods and reaches into the engine, as tests do.
"""

from __future__ import annotations

import json
import os
import sys
import time

from edgespec import Engine  # first: llama.cpp's libraries load before numpy (edgespec/__init__.py)

import numpy as np  # noqa: E402
from edgespec.core import controller as ctl  # noqa: E402
from edgespec.core import plans  # noqa: E402

TOKENS = int(os.environ.get("TOKENS", "128"))
PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a docstring."
steps: list[list] = []


def _wrap(cls) -> None:
    plan, observe = cls.plan, cls.observe

    def traced_plan(self, *a, **kw):
        p = plan(self, *a, **kw)
        steps.append([p.k, None if p.est_speedup is None else round(p.est_speedup, 2), int(p.score)])
        return p

    def traced_observe(self, o):
        if steps and len(steps[-1]) == 3:
            ms = lambda s: round(s * 1000, 2)  # noqa: E731
            steps[-1] += [
                o.k,
                o.n_accepted,
                ms(o.step_s),
                ms(o.draft_s),
                ms(o.verify_s),
                o.catch_up_n,
                ms(o.catch_up_s),
            ]
        return observe(self, o)

    cls.plan, cls.observe = traced_plan, traced_observe


_wrap(ctl.AdaptiveK)
_wrap(plans.FixedK)


def emit(part: str, row: dict) -> None:
    print(json.dumps({part: row}), flush=True)


def state(eng: Engine, temp: float) -> dict:
    c = eng._adaptive[round(temp, 2)]
    t = c.times
    return {
        "curve_ms": [round(x * 1000, 2) for x in t.curve()],
        "by_k": {k: [round(r.value * 1000, 2), r.n] for k, r in enumerate(t.by_k) if r.n},
        "draft_slope_ms": round(t.draft_slope() * 1000, 3),
        "alpha": [round(a, 3) for a in c.alpha()[:12]],
        "pooled": round(c.pooled(), 3),
        "speeds": [round(s, 1) for s in c.speeds()[:14]],
        "plain_chosen": c._plain,
    }


def generation(eng: Engine, part: str, seed: int, **kw) -> None:
    steps.clear()
    eng.reset()
    s = eng.generate(PROMPT, max_tokens=TOKENS, seed=seed, **kw).stats
    row = {
        "tok_s": round(s.tokens_per_s, 1),
        "k": s.k,
        "drafted": s.n_drafted,
        "accepted": s.n_accepted,
        "steps": s.steps,
    }
    row["trace"] = [
        list(x) for x in steps
    ]  # plan k, est speedup, score?, k, accepted, step/draft/verify ms, fed n, fed ms
    emit(part, row)


def divergence(eng: Engine) -> dict:
    """Where greedy speculation first differs from plain decoding, and the target's top two
    logits there read token by token against read in one batch of 5."""
    plain = eng.generate(PROMPT, temperature=0, max_tokens=TOKENS, speculative=False).tokens
    eng.reset()
    spec = eng.generate(PROMPT, temperature=0, max_tokens=TOKENS).tokens
    first = next((i for i, (a, b) in enumerate(zip(plain, spec)) if a != b), None)
    out: dict = {"identical": plain == spec, "first": first}
    if first is None:
        return out
    dec = eng._decoder
    prompt = dec.target.model.tokenize(PROMPT, add_special=True, parse_special=True)
    seq = [*prompt, *plain[:first]]
    m = dec.target.model
    eng.reset()
    m.trim(0)
    m.eval(seq[:-5], 0)
    rows = {}
    for i, tok in enumerate(seq[-5:]):  # one at a time
        rows["single"] = m.eval([tok], len(seq) - 5 + i, 0)[-1].copy()
    m.trim(len(seq) - 5)
    rows["batch"] = m.eval(seq[-5:], len(seq) - 5, 0)[-1].copy()
    for name, r in rows.items():
        top = np.argsort(r)[-2:][::-1]
        out[name] = {"top": top.tolist(), "gap": round(float(r[top[0]] - r[top[1]]), 5)}
    out["max_abs_diff"] = round(float(np.abs(rows["single"] - rows["batch"]).max()), 5)
    out["plain_next"], out["spec_next"] = plain[first], spec[first]
    return out


def main() -> None:
    target, draft = sys.argv[1], sys.argv[2]
    ngl = int(os.environ.get("NGL", "99"))
    eng = Engine.load(target, draft, n_ctx=2048, n_gpu_layers=ngl, lookup=False)
    t0 = time.perf_counter()
    emit("divergence", divergence(eng))
    for temp in (0.0, 0.8):
        for seed in range(3):
            generation(eng, f"adaptive_T{temp}_{seed}", seed, temperature=temp)
            emit(f"state_T{temp}_{seed}", state(eng, temp))
        generation(eng, f"fixed2_T{temp}", 0, temperature=temp, k=2)
        generation(eng, f"plain_T{temp}", 0, temperature=temp, speculative=False)
        generation(eng, f"adaptive_T{temp}_after", 3, temperature=temp)
        emit(f"state_T{temp}_after", state(eng, temp))
    emit("done", {"s": round(time.perf_counter() - t0, 1)})
    eng.close()


if __name__ == "__main__":
    main()
