"""How far lookup's length policy is from what its features allow, and from hindsight (T = 0).

At T = 0 the answer is fixed (decoding is lossless) and lookup's proposal at each position
depends on the committed tokens only, so a draftless decoding is a sequence of choices over
a fixed table: at each position of the demo target's greedy answer, the proposal (up to
L_MAX tokens), its match length, and how many of its tokens hold. This script builds that
table for the copy prompts and replays, on fixed per-call costs (a target pass over n tokens
30.6 + 5.65 (n - 1) ms, as docs/scripts/virtual_costs.py):

- policy: LookupPolicy as the decoder drives it (scored every step, shadow scores on
  plain steps), the prompts in order on one policy (its records carried, as in a server);
- calibrated: the best length for a geometric acceptance whose rate is each answer's own,
  measured in hindsight over the whole answer: one rate, one per record row (match length
  as LookupPolicy keeps it), one per matched length;
- oracle: every step chosen knowing how far the copy holds (a dynamic program).

    .venv/bin/python docs/scripts/lookup_bound.py edit-code,rename,extract,revise,prose

A scratch tool: it reaches into the engine's index as tests do.
"""

from __future__ import annotations

import bisect
import collections
import sys

from edgespec import Engine
from edgespec.core import lookup_policy as lp
from edgespec.core.cache import common_prefix
from edgespec.core.lookup import LookupIndex
from edgespec.frontends.bench.copying import PROMPTS
from edgespec.llama.config import load_config
from edgespec.llama.models import prepare_pair


def cost(n: int) -> float:
    return (30.6 + 5.65 * (n - 1)) / 1000


def table(engine: Engine, prompt: str) -> list[tuple[int, int, int]]:
    """Per answer position: (proposal length, match length, tokens of it that hold)."""
    engine.reset()
    res = engine.generate(prompt, temperature=0.0, max_tokens=256, seed=1)
    toks = list(engine._decoder.index._toks)
    start = len(toks) - res.stats.n_generated
    index, rows = LookupIndex(), []
    index.append(toks[:start])
    for p in range(start, len(toks)):
        prop = index.propose(lp.L_MAX)
        hold = common_prefix(prop.tokens, toks[p : p + len(prop.tokens)])
        rows.append((min(len(prop.tokens), len(toks) - p), prop.n, hold))
        index.append([toks[p]])
    return rows


def policy(tables: list[list[tuple[int, int, int]]]) -> list[float]:
    pol, out = lp.LookupPolicy(lp.VerifyTimes(stale=lp.STALE)), []
    for rows in tables:
        p, t = 0, 0.0
        while p < len(rows):
            n_prop, match, hold = rows[p]
            k, speed = pol.best(match, n_prop) if n_prop else (0, 0.0)
            k = k if speed > pol.plain_speed() else 0  # lookup only where it beats a plain step
            v = cost(k + 1)
            if k:
                pol.times.add(k + 1, v)
                pol.observe(match, k, min(hold, k), v, v)
                p += min(hold, k) + 1
            else:
                pol.times.add(1, v)
                if n_prop:
                    pol.record(match, 1, min(hold, 1))
                pol.idle(v, v, plain=True, fade=not n_prop)
                p += 1
            t += v
        out.append(len(rows) / t)
    return out


def calibrated(rows: list[tuple[int, int, int]], key) -> float:
    accepted, tried = collections.Counter(), collections.Counter()
    for n_prop, match, hold in rows:
        if n_prop:
            accepted[key(match)] += hold
            tried[key(match)] += min(hold + 1, n_prop)
    p, t = 0, 0.0
    while p < len(rows):
        n_prop, match, hold = rows[p]
        a = accepted[key(match)] / tried[key(match)] if n_prop and tried[key(match)] else 0.0
        best_k, best, e, run = 0, 1 / cost(1), 1.0, 1.0
        for k in range(1, n_prop + 1):
            run *= a
            e += run
            if e / cost(k + 1) > best:
                best_k, best = k, e / cost(k + 1)
        t += cost(best_k + 1)
        p += min(hold, best_k) + 1
    return len(rows) / t


def oracle(rows: list[tuple[int, int, int]]) -> float:
    n = len(rows)
    f = [0.0] * (n + 1)
    for p in range(n - 1, -1, -1):
        n_prop, _, hold = rows[p]
        f[p] = min(cost(k + 1) + f[min(n, p + min(hold, k) + 1)] for k in range(n_prop + 1))
    return n / f[0]


def main() -> None:
    names = sys.argv[1].split(",")
    target, _ = prepare_pair(load_config(None), "demo")
    with Engine.load(target, None, n_ctx=2048) as engine:
        tables = [table(engine, PROMPTS[name]) for name in names]
    row = lambda m: lp.ROWS[max(0, bisect.bisect_right(lp.ROWS, m) - 1)]  # noqa: E731
    print("| prompt | policy | calibrated: one rate | per record row | per match length | oracle |")
    print("|---|---|---|---|---|---|")
    for name, rows, speed in zip(names, tables, policy(tables)):
        rates = [calibrated(rows, key) for key in (lambda m: 0, row, lambda m: m)]
        cells = [speed, *rates, oracle(rows)]
        print(f"| {name} | " + " | ".join(f"{x:.1f}" for x in cells) + " |")


if __name__ == "__main__":
    main()
