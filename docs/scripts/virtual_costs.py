"""Paired policy comparisons on the real demo texts without the host's noise.

The real demo pair decodes the bench's copy prompts (edgespec/frontends/bench/copying.py),
but the decoder's clock advances only by a fixed cost per model call, from this machine's
measurements of the demo pair (a target pass over n tokens 30.6 + 5.65 (n - 1) ms, the
draft's call over n tokens interpolated through 17.1, 59, 114, 217, 415 ms at 1, 8, 16, 32,
128). At T = 0 the text is fixed, so a run is deterministic and two versions of the code
compare exactly (the figures in docs/bench-history.md). COSTS=d,s scales the draft's costs
by d and the target's per-token slope by s (other machines). TARGET_MS and DRAFT_MS
("n:ms,n:ms,...", e.g. 1:14.3,2:22.4,4:26.1,7:33.8,11:42.7 and 1:7.7,2:14.1,4:21.0,7:33.7,11:49.3,
stop 65's 2-core EPYC) give a model's measured call costs instead, linear between the sizes.

    COSTS=1,1 .venv/bin/python docs/scripts/virtual_costs.py model,hybrid edit-code,rename,extract,revise,prose 0 2

Arguments: columns (plain, draftless, model, hybrid, or kN: the model draft at a fixed K = N),
prompts (the copy prompts, or make bench's code, story, explanation), temperatures, repeats;
TOKENS=n the answer's length (256); SEED0=n the first repeat's seed (1234, then one up per
repeat); FRESH=1 new engines for each prompt (by default the prompts run in order on one
engine per column, whose controller carries its state from one prompt to the next, as a
server's does); PAIR=name another pair from models.toml (demo-bad: the Q2_K draft).
NOISE=sigma multiplies each call's cost by a lognormal factor (a shared
machine's spread), drawn from a generator per column seeded with NOISE_SEED (7): the same
calls in two columns or two versions draw the same factors, and a column that decides
differently draws differently from there on (so compare versions over several seeds).
DRIFT=a multiplies every cost by exp(a * (sin(2 pi t / P) + sin(2 pi t / 2.7 P + 1)) / 2), t
the virtual clock in seconds, P = DRIFT_P (5): a machine whose speed wanders over seconds (other
processes, a laptop's clock as it heats), the same for every column at the same moment.
The costs of stop 39's make bench (a draft token 0.43 of a plain step, each verified token
0.13 more) are COSTS=0.76,0.68. make bench's adaptive cells, noise-free:

    TOKENS=128 COSTS=1,1 .venv/bin/python docs/scripts/virtual_costs.py \
        k0,k1,k2,k3,k4,k5,k6,k7,k8,model code,story,explanation 0 2

TRACE=hybrid,draftless prints those columns' steps as they are observed (`trace`: l a lookup
step, m a model step, . a plain one, K/accepted, +copied where lookup finished a model draft, the
lag fed, the step's virtual ms) and each answer's decode, draft, verify and prefill times.

Each column prints the median of its repeats' tokens/s and, after "pooled", their tokens over
their seconds. Above T = 0 each column samples its own texts, so judge a change there on the
pooled figure over several seed sets: on code at T = 0.8 a median of 12 seeds moved 5% from
one set to the next (docs/bench-history.md, stop 33).

A scratch tool: it reaches into the engine (its decoder's models and clock) as tests do.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import types

import numpy as np

import edgespec.core.decoder as decoder_mod
from edgespec import Engine
from edgespec.frontends.bench.copying import PROMPTS
from edgespec.frontends.bench.run import PROMPTS as CHAT_PROMPTS
from edgespec.llama.config import load_config
from edgespec.llama.models import prepare_pair

FEED = ([1, 8, 16, 32, 128, 2048], [17.1, 59, 114, 217, 415, 415 * 16])
DRAFT, SLOPE = (float(x) for x in os.environ.get("COSTS", "1,1").split(","))
TOKENS = int(os.environ.get("TOKENS", "256"))
SEED0 = int(os.environ.get("SEED0", "1234"))
FRESH = os.environ.get("FRESH") == "1"
NOISE = float(os.environ.get("NOISE", "0"))
NOISE_SEED = int(os.environ.get("NOISE_SEED", "7"))
DRIFT = float(os.environ.get("DRIFT", "0"))
DRIFT_P = float(os.environ.get("DRIFT_P", "5"))
PAIR = os.environ.get("PAIR", "demo")
# TARGET_MS / DRAFT_MS = "n:ms,n:ms,...": a machine's measured call costs instead (linear between the
# sizes given, the last segment's slope past them); COSTS then does not apply to that model
TABLES = {m: os.environ.get(f"{m.upper()}_MS", "") for m in ("target", "draft")}


def table_cost(spec: str):
    pts = sorted((int(n), float(ms)) for n, ms in (x.split(":") for x in spec.split(",")))
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) if len(xs) > 1 else 0.0
    return lambda n: (float(np.interp(n, xs, ys)) + max(0, n - xs[-1]) * slope) / 1000


TRACE = os.environ.get("TRACE", "")  # columns whose steps are printed (`trace`)


def trace(engine, col: str) -> None:
    """Print each step of `col` as it is observed: source (l lookup, m model, . plain), K/accepted, +copied
    (a model draft lookup finished), the lag fed, and the step's virtual ms with its catch-up."""
    make = engine._controller

    def controller(*args, **kwargs):
        ctrl = make(*args, **kwargs)
        if not getattr(ctrl, "traced", False) and hasattr(ctrl, "observe"):
            observe = ctrl.observe

            def observed(o):
                src = "l" if o.source == "lookup" else ("m" if o.k else ".")
                copied = f"+{o.extended}" if o.extended else ""
                fed = f" fed{o.catch_up_n}" if o.catch_up_n else ""
                print(f"  {col} {src}{o.k}/{o.n_accepted}{copied}{fed} {1000 * (o.step_s + o.catch_up_s):.0f}ms")
                observe(o)

            ctrl.observe, ctrl.traced = observed, True
        return ctrl

    engine._controller = controller


def main() -> None:
    cols, prompts = sys.argv[1].split(","), sys.argv[2].split(",")
    temps, reps = [float(t) for t in sys.argv[3].split(",")], int(sys.argv[4])
    clock = types.SimpleNamespace(now=0.0)
    clock.perf_counter = lambda: clock.now
    decoder_mod.time = clock  # type: ignore[assignment]

    def timed(model, cost, rng):
        evaluate = model.eval

        def eval(tokens, pos, logits_from=None):
            load = math.exp(
                DRIFT
                * (
                    math.sin(2 * math.pi * clock.now / DRIFT_P)
                    + math.sin(2 * math.pi * clock.now / (2.7 * DRIFT_P) + 1)
                )
                / 2
            )
            clock.now += cost(len(tokens)) * load * (float(rng.lognormal(0.0, NOISE)) if NOISE else 1.0)
            return evaluate(tokens, pos, logits_from)

        model.eval = eval

    target, draft = prepare_pair(load_config(None), PAIR)
    kinds = {"plain": (None, False), "draftless": (None, True), "model": (draft, False), "hybrid": (draft, True)}

    def load() -> dict:
        engines = {}
        for col in cols:
            kind = kinds.get(col, (draft, False))  # kN: the model draft at a fixed K = N
            engine = Engine.load(target, kind[0], n_ctx=2048, lookup=kind[1])
            rng = np.random.default_rng(NOISE_SEED)  # both models of a column draw from one
            target_cost = lambda n: (30.6 + SLOPE * 5.65 * (n - 1)) / 1000  # noqa: E731
            draft_cost = lambda n: DRAFT * float(np.interp(n, *FEED)) / 1000  # noqa: E731
            timed(engine._decoder.target.model, table_cost(TABLES["target"]) if TABLES["target"] else target_cost, rng)
            if engine._decoder.draft is not None:
                timed(engine._decoder.draft.model, table_cost(TABLES["draft"]) if TABLES["draft"] else draft_cost, rng)
            engines[col] = engine
            if col in TRACE.split(","):
                trace(engine, col)
        return engines

    engines = load()
    for name in prompts:
        if FRESH and name != prompts[0]:
            for engine in engines.values():
                engine.close()
            engines = load()  # no controller state carried over from the prompts before
        for temp in temps:
            runs: dict[str, list[float]] = {col: [] for col in cols}
            pooled: dict[str, list[float]] = {col: [0.0, 0.0] for col in cols}  # tokens, seconds
            for r in range(reps):
                for col, engine in engines.items():
                    engine.reset()
                    fixed = int(col[1:]) if col[0] == "k" else None
                    res = engine.generate(
                        PROMPTS.get(name) or CHAT_PROMPTS[name],
                        temperature=temp,
                        max_tokens=TOKENS,
                        speculative=col != "plain" and fixed != 0,
                        k=fixed,
                        seed=SEED0 + r,
                    )
                    runs[col].append(res.stats.tokens_per_s)
                    if col in TRACE.split(","):
                        st = res.stats
                        ms = {k: round(1000 * getattr(st, k + "_s")) for k in ("decode", "draft", "verify", "prefill")}
                        print(f"  {col}: {st.n_generated} tokens, ms {ms}")
                    pooled[col][0] += res.stats.n_generated
                    pooled[col][1] += res.stats.decode_s
            med = {col: statistics.median(v) for col, v in runs.items()}
            ref = med.get("model", med[cols[0]])
            pool = {col: n / t if t > 0 else 0.0 for col, (n, t) in pooled.items()}
            ref_pool = pool.get("model", pool[cols[0]])
            print(
                f"{name} T={temp}: "
                + ", ".join(f"{c}={med[c]:.1f} ({med[c] / ref:.2f})" for c in cols)
                + "; pooled "
                + ", ".join(f"{c}={pool[c]:.1f} ({pool[c] / ref_pool:.2f})" for c in cols),
                flush=True,
            )


if __name__ == "__main__":
    main()
