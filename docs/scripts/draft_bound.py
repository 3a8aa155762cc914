"""How far a K policy can go on the demo pair's real answers: fixed K, the K a rate known in
hindsight picks, and an oracle that knows where every draft breaks.

With a seed, every token is drawn from noise keyed by (seed, position, token), the draft's
included, and a draft token is kept when it is the target's own draw (README, "How
decoding works"). So whether the draft's token matches at a position depends on the answer
alone, not on K: one answer has one map of matches and breaks (at T = 0 too: argmax against
argmax). Two fixed-K runs (K = 24 and 17) read the map (a position neither tested is a bonus
token in both; counted as a match, its confidence as 0: about one position an answer), and
any policy is then replayed on it exactly, on a cost curve T(K) = A + B K for a draft step
and T0 for a plain one (milliseconds; the defaults are the demo pair's medians at fixed K on
this machine, docs/bench-history.md stop 55).

    .venv/bin/python docs/scripts/draft_bound.py code,story,explanation 0.8 6

Arguments: prompts (make bench's), temperature, seeds (1234 on). CURVE=A,B,T0 (62,14.5,28);
MAPS=path keeps the maps in a JSON file and reads them from there next time; REPEAT=n drives
the adaptive controller over the answers n times in turn and reports the last round (a warm
controller, as make bench's later repeats have it).

Columns: the best fixed K (0..24) and its tokens/s; the K that the answer's own per-token
rate, known in hindsight, makes best under independent tokens (what the adaptive
controller estimates as it goes) and what it makes on the map, over the best fixed K; the
best fixed K with a fixed stop threshold (drafting stops after a token whose confidence is
below it, CUTS; 0.0: none), over the best fixed K; the adaptive controller itself driven
over the answers (its decisions, its learned stop included, no noise); the oracle (a
shortest path over the map: each step's K chosen knowing where the next break is), the
bound no rule on K alone can pass. A scratch tool: it reaches into the engine.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

K_MAX = 24
CUTS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)  # stop thresholds tried with each fixed K
REPEAT = int(os.environ.get("REPEAT", "1"))
A, B, T0 = (float(x) for x in os.environ.get("CURVE", "62,14.5,28").split(","))


def cost(k: int) -> float:
    return T0 if k == 0 else A + B * k


def build(prompts: list[str], temp: float, seeds: int) -> dict[str, dict[str, list]]:
    """{"prompt/seed": {"breaks": [1 where the draft's token is not the target's, else 0],
    "sure": [the draft's confidence in its token there (README, "How it decides"), -1 untested]}}."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from edgespec import Engine
    from edgespec.core import plans
    from edgespec.frontends.bench.run import PROMPTS
    from tests.conftest import demo_paths

    engine = Engine.load(*demo_paths(), n_ctx=2048)
    engine.p_min = 1e-12  # fixed K asks for the draft's confidences and (almost) never stops early
    steps: list[tuple[int, int, tuple[float, ...]]] = []
    plans.FixedK.observe = lambda self, o: steps.append((o.k, o.n_accepted, o.sure))  # type: ignore[method-assign]
    maps = {}
    for name in prompts:
        for s in range(seeds):
            breaks: dict[int, int] = {}
            sure: dict[int, float] = {}
            answers = []
            for k in (24, 17):
                engine.reset()
                steps.clear()
                out = engine.generate(PROMPTS[name], temperature=temp, max_tokens=256, k=k, seed=1234 + s)
                answers.append(out.tokens)
                pos = 0
                for drafted, kept, confidences in steps:
                    breaks.update((pos + i, 0) for i in range(kept))
                    if kept < drafted:
                        breaks[pos + kept] = 1
                    for i, c in enumerate(confidences[: kept + 1]):
                        sure.setdefault(pos + i, c)
                    pos += kept + 1
            assert answers[0] == answers[1], "a seeded answer changed with K"
            n = len(answers[0])
            maps[f"{name}/{s}"] = {
                "breaks": [breaks.get(i, 0) for i in range(n)],
                "sure": [sure.get(i, -1.0) for i in range(n)],
            }
    return maps


Answer = dict[str, list]


def step(answer: Answer, p: int, k: int, stop_below: float = 0.0) -> tuple[int, int, tuple[float, ...]]:
    """A step at position p drafting up to k tokens, stopping after one whose confidence is
    below `stop_below` (the draft does not know where it breaks): (drafted, kept, confidences)."""
    breaks, sure = answer["breaks"], answer["sure"]
    n, drafted = len(breaks), 0
    while drafted < k and p + drafted < n:
        drafted += 1
        if 0.0 <= sure[p + drafted - 1] < stop_below:
            break
    kept = 0
    while kept < drafted and not breaks[p + kept]:
        kept += 1
    return drafted, kept, tuple(max(0.0, c) for c in sure[p : p + min(drafted, kept + 1)])


def replay(answer: Answer, k: int, stop_below: float = 0.0) -> float:
    """Milliseconds a fixed K (and a fixed stop threshold) takes over the answer."""
    p, total = 0, 0.0
    while p < len(answer["breaks"]):
        drafted, kept, _ = step(answer, p, k, stop_below)
        total += cost(drafted)
        p += kept + 1
    return total


def oracle(answer: Answer) -> float:
    """The least milliseconds any sequence of K can take (each step's K knowing the map)."""
    row = answer["breaks"]
    n = len(row)
    best = [0.0] * (n + 1)
    for p in range(n - 1, -1, -1):
        options, kept = [cost(0) + best[p + 1]], 0
        for k in range(1, K_MAX + 1):
            if kept == k - 1 and p + kept < n and not row[p + kept]:
                kept += 1  # the first k - 1 drafts held: does the k-th?
            options.append(cost(k) + best[min(n, p + kept + 1)])
        best[p] = min(options)
    return best[0]


def adaptive(answers: list[Answer]) -> list[float]:
    """Milliseconds the adaptive controller takes over each answer in turn (one controller, as
    an engine keeps it from request to request), replayed on the map and the curve: its
    decisions alone, its in-step stop on the map's confidences included, without catch-up
    scores or lookup; a bonus token is scored 1 or 0 by the map (the engine scores it with a
    probability)."""
    from edgespec.core.controller import AdaptiveK, StepOutcome

    ctrl, out = AdaptiveK(), []
    for answer in answers:
        n = len(answer["breaks"])
        ctrl.begin(n)
        p, total = 0, 0.0
        while p < n:
            plan = ctrl.plan()
            drafted, kept, sure = step(answer, p, plan.k, plan.stop_below)
            t, draft = cost(drafted), B * drafted
            total += t
            bonus = 1.0 - answer["breaks"][p + kept] if drafted and kept == drafted and p + kept < n else None
            ctrl.observe(StepOutcome(drafted, kept, draft / 1000, (t - draft) / 1000, t / 1000, sure, bonus=bonus))
            p += kept + 1
        out.append(total)
    return out


def iid_k(rate: float) -> int:
    """The best K where each draft holds with probability `rate`, independently."""
    return max(range(K_MAX + 1), key=lambda k: sum(rate**i for i in range(k + 1)) / cost(k))


def speed(answers: list[Answer], ms: list[float]) -> float:
    """Tokens/s, the mean over answers."""
    return sum(len(a["breaks"]) / t * 1000 for a, t in zip(answers, ms)) / len(answers)


def main() -> None:
    prompts, temp, seeds = sys.argv[1].split(","), float(sys.argv[2]), int(sys.argv[3])
    path = os.environ.get("MAPS")
    if path and Path(path).exists():
        maps = json.loads(Path(path).read_text())
    else:
        maps = build(prompts, temp, seeds)
        if path:
            Path(path).write_text(json.dumps(maps))
    print(f"T = {temp}, curve {A:g} + {B:g} K ms (plain {T0:g}), {seeds} answers per prompt; tokens/s, mean of answers")
    print("| prompt | breaks / token | best fixed K | hindsight rate's K | best K and stop | adaptive | oracle |")
    print("|---|---|---|---|---|---|---|")
    for name in prompts:
        answers = [a for key, a in maps.items() if key.split("/")[0] == name]
        tokens = sum(len(a["breaks"]) for a in answers)
        rate = 1 - sum(sum(a["breaks"]) for a in answers) / tokens
        fixed = {k: speed(answers, [replay(a, k) for a in answers]) for k in range(K_MAX + 1)}
        best = max(fixed, key=fixed.__getitem__)
        k_iid = iid_k(rate)
        stops = {(k, c): speed(answers, [replay(a, k, c) for a in answers]) for k in range(1, K_MAX + 1) for c in CUTS}
        k_stop, cut = max(stops, key=stops.__getitem__)
        ms = adaptive(answers * REPEAT)  # one controller over the answers REPEAT times; the last round counts
        adapt = speed(answers, ms[-len(answers) :])
        top = speed(answers, [oracle(a) for a in answers])
        print(
            f"| {name} | {1 - rate:.3f} | K = {best}: {fixed[best]:.1f} "
            f"| K = {k_iid}: {fixed[k_iid] / fixed[best]:.3f} "
            f"| K = {k_stop}, {cut}: {stops[k_stop, cut] / fixed[best]:.3f} | {adapt / fixed[best]:.3f} "
            f"| {top / fixed[best]:.2f} |"
        )


if __name__ == "__main__":
    main()
