"""Scoring lookup proposals that a step did not verify (shadow scores).

A model or plain step commits tokens that lookup did not draft. Each proposal lookup
would have made there is scored against them: how many of its leading tokens the step
committed. At any temperature that is the acceptance lookup would have had, in law (a
committed token is a sample of the target's p, so it equals a proposed x with
probability p(x): LookupPolicy.record). So lookup's record follows the text while the
model drafts, and lookup is taken once it pays.

`first`: the proposal the step was planned with. `chain`: within a model step's committed
tokens, the proposals lookup would have made after that one had it drafted them itself,
each at the position after the last one's first miss (where its bonus token would have
ended the step). Without them a model step of 30 tokens taught lookup as much as a plain
step of one, and a copy that held (extract after a rename, this machine's costs) went on
being decoded by the model: 1.04x model-only where draftless made 1.75x
(docs/bench-history.md, stop 66).
Pure: no model, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from .cache import common_prefix
from .lookup import LookupIndex, Proposal
from .lookup_policy import L_MAX

# look-ups per step, each 6-26 us against milliseconds a draft token: a bound for a larger k_max,
# since a step of today's K_MAX (32) commits at most 33 tokens and so never reaches it
CHAIN_MAX = 32


def first(proposal: Proposal, new: Sequence[int]) -> tuple[int, int]:
    """(tokens scored, how many leading ones were committed) of `proposal` against `new`."""
    scored = min(len(new), len(proposal.tokens))
    return scored, common_prefix(proposal.tokens[:scored], new[:scored])


def chain(index: LookupIndex, proposal: Proposal, new: Sequence[int]) -> tuple[tuple[int, int, int], ...]:
    """Append `new` to `index` (which covers what came before it), returning on the way
    (match, tokens scored, leading ones committed) for each proposal after `proposal`
    (module docstring). A position with nothing to propose is passed by one token, as a
    plain step would."""
    out: list[tuple[int, int, int]] = []
    at, looked = 0, 0
    i = first(proposal, new)[1] + 1
    while i < len(new) and looked < CHAIN_MAX:
        index.append(new[at:i])
        at, looked = i, looked + 1
        prop = index.propose(L_MAX)
        if not prop.tokens:
            i += 1
            continue
        scored, held = first(prop, new[i:])
        out.append((prop.n, scored, held))
        i += held + 1
    index.append(new[at:])
    return tuple(out)
