"""Fixed K and the adaptive controller on the real clock, one make-bench prompt, rounds
interleaved, with what each step drafted and took.

Per column: the median tokens/s over the rounds, and over rounds 1.. (the first pays the
adaptive controller's warm-up) the steps by K: how many, their median time in ms, tokens a
step. For the adaptive column, its K run by run (`.` a plain step, `a` K = 1, `b` K = 2, ...),
and at the end what the controller believes: its predicted speed, whole-step cost and expected
tokens per K. The demo pair, the model alone (prompt lookup off, as make bench's cells run).

    .venv/bin/python docs/scripts/real_clock_trace.py code 0 4 6,8,10,12,16,a

Arguments: prompt (code, story, explanation), temperature, rounds, columns (K values and `a`;
a K given twice runs as two columns, which shows how far the same decoding reads apart in one run).
Run it on a quiet machine: the columns share its noise only within a round.
"""

from __future__ import annotations

import collections
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from edgespec import Engine
from edgespec.frontends.bench.run import PROMPTS
from tests.conftest import demo_paths


def main() -> None:
    prompt = PROMPTS[sys.argv[1] if len(sys.argv) > 1 else "code"]
    temp = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    cols = sys.argv[4].split(",") if len(sys.argv) > 4 else ["8", "a"]
    paths = demo_paths()
    assert paths is not None, "prepare the demo pair first: edgespec models prepare demo"
    eng = Engine.load(*paths, n_ctx=2048, lookup=False)
    runs: dict[int, list[tuple[float, list[tuple[int, int, float]]]]] = collections.defaultdict(list)
    for r in range(rounds):
        for i, col in enumerate(cols):
            eng.reset()
            steps, last, stats = [], None, None
            for ev in eng.stream(
                prompt, temperature=temp, max_tokens=256, k=None if col == "a" else int(col), seed=1234
            ):
                now = time.perf_counter()
                if last is not None:
                    steps.append((ev.k, len(ev.tokens), now - last))
                last, stats = now, ev.stats
            assert stats is not None
            runs[i].append((stats.tokens_per_s, steps))
            print(f"round {r} {col}: {stats.tokens_per_s:.1f} tok/s, {stats.n_generated} tokens, {stats.steps} steps")
    for i, col in enumerate(cols):
        by: dict[int, list[tuple[float, int]]] = collections.defaultdict(list)
        for _, steps in runs[i][1:]:
            for k, n, dt in steps:
                by[k].append((dt, n))
        table = {
            k: (len(v), round(1000 * statistics.median(d for d, _ in v), 1), round(sum(n for _, n in v) / len(v), 2))
            for k, v in sorted(by.items())
        }
        print(f"{col}: median {statistics.median(s for s, _ in runs[i]):.1f} tok/s; by K (steps, ms, tokens): {table}")
    for i, (_, steps) in enumerate(runs[cols.index("a")] if "a" in cols else []):
        print(f"adaptive run {i}: " + "".join("." if k == 0 else chr(ord("a") + k - 1) for k, _, _ in steps))
    ctrl = eng._adaptive.get(round(temp, 2))
    if ctrl is not None:
        print("predicted tok/s by K:", [round(ctrl.speed(k), 1) for k in range(17)])
        print("step cost ms by K:  ", [round(1000 * c, 1) for c in ctrl.step_costs()[:17]])
        print("expected tokens by K:", [round(ctrl.expected_tokens(k), 2) for k in range(17)])


if __name__ == "__main__":
    main()
