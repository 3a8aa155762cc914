"""The running Stats of one generation: one step added at a time, and a copy per event."""

from __future__ import annotations

import dataclasses

from .controller import LOOKUP, Plan, StepOutcome
from .events import Stats


def snapshot(stats: Stats) -> Stats:
    """A copy for one event: the running Stats keeps changing after it is yielded."""
    return dataclasses.replace(
        stats,
        accepted_per_position=list(stats.accepted_per_position),
        drafted_per_position=list(stats.drafted_per_position),
        sources={name: dict(counts) for name, counts in stats.sources.items()},
    )


def account(stats: Stats, plan: Plan, o: StepOutcome, n_emit: int, busy_s: float) -> None:
    """Add one step to the running stats."""
    stats.steps += 1
    stats.k = plan.k
    stats.n_generated += n_emit
    stats.n_drafted += o.k
    stats.n_accepted += o.n_accepted
    own, own_accepted, copied, copied_accepted = o.split()  # a draft lookup finished: the copy is lookup's
    for source, drafted, accepted in ((o.source, own, own_accepted), (LOOKUP, copied, copied_accepted)):
        if drafted:
            by_source = stats.sources.setdefault(source, {"drafted": 0, "accepted": 0})
            by_source["drafted"] += drafted
            by_source["accepted"] += accepted
    stats.draft_s += o.draft_s
    stats.verify_s += o.verify_s
    grow = o.k - len(stats.drafted_per_position)
    if grow > 0:
        stats.drafted_per_position.extend([0] * grow)
        stats.accepted_per_position.extend([0] * grow)
    for i in range(o.k):
        stats.drafted_per_position[i] += 1
        stats.accepted_per_position[i] += i < o.n_accepted
    stats.decode_s += busy_s  # time inside the generator only, not the consumer's
    stats.elapsed_s = stats.prefill_s + stats.decode_s
    stats.est_speedup = plan.est_speedup
