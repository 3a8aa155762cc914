"""How fast any hybrid of prompt lookup and the model draft could decode the copy prompts (T = 0).

At T = 0 the answer is fixed (decoding is lossless), and so is, at every position of it:
how many tokens the draft model's greedy drafts would get right from there (its argmax
against the answer's next tokens, given the answer so far), and lookup's proposal and how
much of it holds (the index sees only the committed tokens). A decoding is then a path of
steps over the answer, each step one of:

- plain: one target pass, one token;
- lookup: k of lookup's proposed tokens verified (k up to the proposal's length);
- model: K draft tokens (1..K_MAX), the draft first fed the tokens it has not seen;
- model then lookup: K draft tokens all right, then lookup's proposal from there
  (the decoder's `Plan.extend`), as far as it holds.

An oracle picks every step knowing how far each source holds (a shortest path; the state
is the position and how many committed tokens the draft has not seen). Two branches
verified in one target batch (DESIGN.md's other hybrid) cannot beat it: such a step makes
the tokens of its better branch at the cost of both. The `tree` column is that hybrid with
no choice to make: every step drafts K model tokens and verifies them beside up to `cap`
of lookup's (their shared correct prefix verified once), the best (K, cap) in hindsight. Costs are virtual_costs.py's fixed
per-call ones (COSTS=d,s as there), so its `model` column (the adaptive model-only
controller on the same costs) is the bar's denominator:

    COSTS=0.76,0.68 .venv/bin/python docs/scripts/hybrid_bound.py edit-code,rename,extract,revise

Columns: tokens/s of plain decoding, the oracle over lookup alone, over the model alone,
and over both, the fixed two-branch policy (`tree`); the share of the answer each source
could supply. A scratch tool: it reaches into the engine as tests do.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from edgespec import Engine
from edgespec.core import lookup_policy as lp
from edgespec.core.cache import common_prefix
from edgespec.core.lookup import LookupIndex
from edgespec.frontends.bench.copying import PROMPTS
from edgespec.llama.config import load_config
from edgespec.llama.models import prepare_pair

FEED = ([1, 8, 16, 32, 128, 2048], [17.1, 59, 114, 217, 415, 415 * 16])  # virtual_costs.py's
DRAFT, SLOPE = (float(x) for x in os.environ.get("COSTS", "1,1").split(","))
K_MAX = 32
INF = float("inf")


def verify(n: int) -> float:
    return (30.6 + SLOPE * 5.65 * (n - 1)) / 1000


def feed(n: int) -> float:
    return DRAFT * float(np.interp(n, *FEED)) / 1000 if n else 0.0


def tables(engine: Engine, messages: list[dict]) -> tuple[list[int], list[tuple[int, int]]]:
    """Per answer position: how many of the draft's greedy tokens hold from there, and
    (lookup's proposal length, how many of it hold)."""
    engine.reset()
    res = engine.generate(messages, temperature=0.0, max_tokens=256, speculative=False)
    prompt, ans = engine.tokenize(messages), res.tokens
    model = engine._decoder.draft.model
    model.set_head(0)
    model.trim(0)
    model.eval(prompt[:-1], 0, None)
    seq, right = [prompt[-1], *ans[:-1]], []
    for i in range(0, len(seq), 32):
        rows = model.eval(seq[i : i + 32], len(prompt) - 1 + i, 0)
        right += [int(np.argmax(r)) for r in rows]
    good = [a == b for a, b in zip(right, ans)]
    run = [0] * (len(ans) + 1)
    for p in range(len(ans) - 1, -1, -1):
        run[p] = run[p + 1] + 1 if good[p] else 0
    index, look = LookupIndex(), []
    index.append(prompt)
    for p in range(len(ans)):
        prop = index.propose(lp.L_MAX)
        held = common_prefix(prop.tokens, ans[p : p + len(prop.tokens)])
        look.append((min(len(prop.tokens), len(ans) - p), held))
        index.append([ans[p]])
    return run[: len(ans)], look


def oracle(run: list[int], look: list[tuple[int, int]], lookup: bool, model: bool) -> float:
    """Tokens/s of the fastest path (f[p][g]: the seconds left from position p with the
    draft g tokens behind)."""
    n = len(run)
    g_max = n + 2
    f = np.full((n + 1, g_max + 1), INF)
    f[n, :] = 0.0
    for p in range(n - 1, -1, -1):
        best_model = INF  # the model's steps, apart from feeding the lag (which depends on g)
        if model:
            for k in range(1, K_MAX + 1):
                a = min(run[p], k)
                t = min(n, p + a + 1)
                drafting = (k - 1) * feed(1)
                best_model = min(best_model, drafting + verify(k + 1) + f[t, 2 if a == k else 1])
                if lookup and a == k and p + k < n:  # the draft's tokens all right, then lookup's
                    hold = look[p + k][1]
                    if hold:
                        t2 = min(n, p + k + hold + 1)
                        best_model = min(best_model, drafting + verify(k + hold + 1) + f[t2, hold + 2])
        n_prop, hold = look[p]
        for g in range(g_max + 1):
            g1 = min(g_max, g + 1)
            best = verify(1) + f[p + 1, g1]
            if lookup:
                for k in range(1, n_prop + 1):
                    t = min(n - p, min(hold, k) + 1)
                    best = min(best, verify(k + 1) + f[p + t, min(g_max, g + t)])
            if model:
                best = min(best, feed(g) + best_model)
            f[p, g] = best
    return n / f[0, 1]


def tree(run: list[int], look: list[tuple[int, int]]) -> float:
    """Tokens/s of the best fixed two-branch policy: each step K model drafts and min(proposal, cap)
    looked-up tokens in one target batch, the step keeping its better branch."""
    n, best = len(run), 0.0
    for k in range(1, K_MAX + 1):
        for cap in (0, 2, 4, 8, 16, 32):
            p, g, t = 0, 1, 0.0
            while p < n:
                n_prop, hold = look[p]
                got_m, got_l = min(run[p], k), min(hold, n_prop, cap)
                t += feed(g) + (k - 1) * feed(1) + verify(1 + k + min(n_prop, cap) - min(got_m, got_l))
                a = max(got_m, got_l)
                g = a + 1 - min(got_m, k - 1)  # the draft has read its own drafts but the last
                p = min(n, p + a + 1)
            best = max(best, n / t)
    return best


def main() -> None:
    names = sys.argv[1].split(",")
    target, draft = prepare_pair(load_config(None), "demo")
    with Engine.load(target, draft, n_ctx=2048) as engine:
        data = {name: tables(engine, PROMPTS[name]) for name in names}
    print("| prompt | plain | lookup oracle | model oracle | both, oracle | tree | lookup holds | model holds |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (run, look) in data.items():
        cells = [len(run) / (len(run) * verify(1))]
        cells += [oracle(run, look, lk, md) for lk, md in ((True, False), (False, True), (True, True))]
        cells.append(tree(run, look))
        share_l = sum(1 for _, h in look if h) / len(look)
        share_m = sum(1 for r in run if r) / len(run)
        print(f"| {name} | " + " | ".join(f"{x:.1f}" for x in cells) + f" | {share_l:.0%} | {share_m:.0%} |")


if __name__ == "__main__":
    main()
