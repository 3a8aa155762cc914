"""Shadow scores: the lookup proposals a model step did not verify, scored against what it
committed, the first one and those lookup would have chained after it."""

from __future__ import annotations

import numpy as np

from edgespec.core.cache import common_prefix
from edgespec.core.controller import AdaptiveK, FixedK, StepOutcome
from edgespec.core.decoder import Decoder
from edgespec.core.lookup import LookupIndex
from edgespec.core.lookup_policy import L_MAX
from edgespec.core.sampling import SamplingParams
from edgespec.core.shadow import CHAIN_MAX, chain
from tests.fakes import FakeModel, decode
from tests.test_lookup_policy import cpu_like
from tests.test_lookup_tail import Extending, hybrid, run

SOURCE = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 10, 11]  # ends in "10 11", seen at its start


def _index() -> LookupIndex:
    index = LookupIndex()
    index.append(SOURCE)
    return index


def test_the_chain_scores_the_copy_resumed_after_an_edit() -> None:
    index = _index()
    first = index.propose(L_MAX)
    assert first.tokens[:4] == (12, 13, 14, 15)
    # the step wrote "12 13", then 99 for 14, then copied on: the first proposal held 2 tokens and
    # its bonus (99) ended it; at 15 nothing matches "13 99" yet; at 16 the copy is found again
    # past the edit (a one-token match) and its 2 tokens left are both committed
    new = [12, 13, 99, 15, 16, 17]
    assert chain(index, first, new) == ((1, 2, 2),)
    assert len(index) == len(SOURCE) + len(new)


def test_a_proposal_that_held_whole_is_followed_from_the_token_after_its_bonus() -> None:
    index = _index()  # "10 11" again: the copy runs on with period 10, L_MAX tokens a proposal
    new = [10 + (2 + j) % 10 for j in range(40)]
    # the first holds 16 and its bonus is token 16; the next from 17 holds 16, the last 6 of 6
    assert chain(index, index.propose(L_MAX), new) == ((16, 16, 16), (16, 6, 6))


def _walked(new: list[int]) -> list[tuple[int, int, int]]:
    """Lookup drafting `new` itself, L_MAX tokens a step: each step's (match, scored, held), the
    first step's left out (it is the step's own proposal, scored apart)."""
    index, out, i, looked = _index(), [], 0, -1
    while i < len(new) and looked < CHAIN_MAX:
        prop, looked = index.propose(L_MAX), looked + 1
        step = 1
        if prop.tokens:
            scored = min(len(prop.tokens), len(new) - i)
            held = common_prefix(prop.tokens[:scored], new[i : i + scored])
            out += [(prop.n, scored, held)] if looked else []
            step = held + 1
        index.append(new[i : i + step])
        i += step
    return out


def test_the_chain_is_what_lookup_drafting_the_text_would_have_scored() -> None:
    rng = np.random.default_rng(9)
    for _ in range(200):  # a small alphabet: copies, breaks and resumed copies
        new = [int(x) for x in rng.integers(10, 16, size=int(rng.integers(2, 40)))]
        index = _index()
        assert list(chain(index, index.propose(L_MAX), new)) == _walked(new)


def test_after_the_chain_the_index_is_the_one_a_plain_append_gives() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        new = [int(x) for x in rng.integers(10, 20, size=int(rng.integers(1, 30)))]
        index, plain = _index(), _index()
        chain(index, index.propose(L_MAX), new)
        plain.append(new)
        # the same tokens and occurrences (its look-ups may have learnt a replacement, as lookup
        # steps would have: edgespec/core/replacements.py); with a window small enough to evict
        # within the step, the pieces evict where lookup's own steps would, not where one append does
        assert (index._toks, index._head, index._prev) == (plain._toks, plain._head, plain._prev)


def test_a_text_with_nothing_to_copy_costs_at_most_chain_max_look_ups() -> None:
    index, calls = _index(), []
    propose = index.propose
    index.propose = lambda k: calls.append(k) or propose(k)  # type: ignore[method-assign]
    chain(index, index.propose(L_MAX), list(range(100, 160)))
    assert len(calls) == 1 + CHAIN_MAX


class _Recording(FixedK):
    def __init__(self, k: int) -> None:
        super().__init__(k)
        self.outcomes: list[StepOutcome] = []

    def observe(self, outcome: StepOutcome) -> None:
        self.outcomes.append(outcome)


def test_model_steps_report_the_chained_proposals_within_what_they_committed() -> None:
    # a sharp fake repeats its loops, which lookup can copy; the model drafts 12 a step
    dec = Decoder(FakeModel(sharp=6.0), FakeModel(sharp=6.0, noise=1.0), lookup=True)
    ctrl = _Recording(12)
    prompt, greedy = [1, 5, 9, 13, 21, 30, 44, 5, 9], SamplingParams(temperature=0.0)
    steps = list(decode(dec, prompt, greedy, ctrl, max_tokens=150, rng=np.random.default_rng(0)))
    chained = [(o, s) for o, s in zip(ctrl.outcomes, steps) if o.chained]
    assert chained
    for o, step in chained:
        left = len(step.tokens) - o.shadow[1] - 1  # committed after the first proposal's bonus token
        for _, scored, held in o.chained:
            assert 0 <= held <= scored <= left
            left -= held + 1
    assert any(held == scored for o, _ in chained for _, scored, held in o.chained)


def test_chained_scores_teach_lookup_as_lookup_steps_would() -> None:
    # a model step that committed 30 tokens of a copy broken twice: with the chain, lookup's
    # record sees three proposals (two that held 9 tokens), without it one (held 9)
    def after(chained: tuple[tuple[int, int, int], ...]) -> float:
        ctrl = AdaptiveK()
        for _ in range(6):  # warm-up
            k = ctrl.plan(0, None).k
            ctrl.observe(StepOutcome(k, k, 0.004 * k, cpu_like(k + 1), cpu_like(k + 1) + 0.004 * k))
        for _ in range(3):
            ctrl.lookup.record(4, 8, 1)  # lookup broke early of late
        ctrl.plan(0, None)
        ctrl.observe(
            StepOutcome(29, 29, 0.1, cpu_like(30), cpu_like(30) + 0.1, match=4, shadow=(10, 9), chained=chained)
        )
        return ctrl.lookup.alpha(4)[5]

    assert after(((4, 10, 9), (4, 10, 9))) > after(()) + 0.1


def test_a_step_lookup_finished_is_not_chained() -> None:
    # its copied tokens were verified and scored as lookup's (StepOutcome.extended): scored again
    # by the chain they would count twice
    ctrl = Extending(3)
    run(hybrid(), ctrl, n=120)
    extended = [o for o in ctrl.outcomes if o.extended]
    assert extended and not any(o.chained for o in extended)
