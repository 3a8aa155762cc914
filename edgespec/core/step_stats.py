"""The running Stats of one generation: one step added at a time, and a copy per event."""

from __future__ import annotations

import dataclasses

from .controller import LOOKUP, MODEL, Plan, StepOutcome
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
    """Add one step to the running stats. Accepted drafts count where they are in the answer:
    those verified past an end-of-generation token are drafted, not accepted (as a stop
    string's tail, `drop`), so accepted never exceeds the tokens generated."""
    if not stats.steps:
        stats.n_prefilled += 1  # the first step evaluates the prompt's last token (a cancel before it does not)
    stats.steps += 1
    stats.k = plan.k
    stats.n_generated += n_emit
    stats.n_drafted += o.k
    kept = min(o.n_accepted, n_emit)
    stats.n_accepted += kept
    own = o.k - o.extended  # a draft lookup finished: the copy is lookup's
    for source, drafted, accepted in ((o.source, own, min(kept, own)), (LOOKUP, o.extended, max(0, kept - own))):
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
        stats.accepted_per_position[i] += i < kept
    stats.decode_s += busy_s  # time inside the generator only, not the consumer's
    stats.elapsed_s = stats.prefill_s + stats.decode_s
    stats.est_speedup = plan.est_speedup


def drop(stats: Stats, sources: list[str], kept: int) -> None:
    """A stop string ended the answer inside the last step: its tokens from `kept` on are
    not emitted (`sources`: where each of the step's tokens came from, Step.sources)."""
    for i in range(kept, len(sources)):
        stats.n_generated -= 1
        if sources[i] != "target":  # an accepted draft at position i of the step
            stats.n_accepted -= 1
            stats.sources[LOOKUP if sources[i] == "lookup" else MODEL]["accepted"] -= 1
            stats.accepted_per_position[i] -= 1
