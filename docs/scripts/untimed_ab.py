"""Real clock: adaptive with and without the untimed-K probe (StepTimes.untimed), beside K = 6.

Two engines on the demo pair; each round (seed 1234 + r) runs K = 6 and adaptive without
the rule on the first, adaptive with it on the second, the two adaptive columns' order
alternating by round. Prints each round and the medians per prompt (stop 54,
docs/bench-history.md):

    .venv/bin/python docs/scripts/untimed_ab.py code,story,explanation 3 0.8

Arguments: prompts (make bench's), rounds, temperature. A scratch tool: it switches the
rule off by replacing StepTimes.untimed for the "without" column's calls.
"""

from __future__ import annotations

import statistics
import sys

from edgespec import Engine
from edgespec.core.step_times import StepTimes
from edgespec.frontends.bench.run import PROMPTS
from edgespec.llama.config import load_config
from edgespec.llama.models import prepare_pair


def main() -> None:
    names, reps = sys.argv[1].split(","), int(sys.argv[2])
    temp = float(sys.argv[3]) if len(sys.argv) > 3 else 0.8
    target, draft = prepare_pair(load_config(None), "demo")
    first, second = Engine.load(target, draft, n_ctx=2048), Engine.load(target, draft, n_ctx=2048)
    rule = StepTimes.untimed

    def once(engine: Engine, prompt: str, k: int | None, seed: int, on: bool) -> float:
        StepTimes.untimed = rule if on else (lambda self, expected, best, top=None: 0)  # type: ignore[method-assign]
        engine.reset()
        return engine.generate(prompt, temperature=temp, max_tokens=256, k=k, seed=seed).stats.tokens_per_s

    for name in names:
        res: dict[str, list[float]] = {"k6": [], "without": [], "with": []}
        for r in range(reps):
            order = [("k6", first, 6, False), ("without", first, None, False), ("with", second, None, True)]
            if r % 2:
                order = [order[0], order[2], order[1]]
            for key, engine, k, on in order:
                res[key].append(once(engine, PROMPTS[name], k, 1234 + r, on))
            print(name, 1234 + r, {key: round(v[-1], 1) for key, v in res.items()}, flush=True)
        med = {key: statistics.median(v) for key, v in res.items()}
        print(
            f"== {name} T={temp}: " + ", ".join(f"{key}={v:.1f}" for key, v in med.items())
            + f"; with / without {med['with'] / med['without']:.2f}, with / K=6 {med['with'] / med['k6']:.2f}",
            flush=True,
        )  # fmt: skip


if __name__ == "__main__":
    main()
