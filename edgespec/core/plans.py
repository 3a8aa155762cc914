"""What a controller tells the decoder before a step (Plan) and hears back after it
(StepOutcome); the protocol a controller keeps, and the simplest one, a fixed K
(the adaptive one: controller.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .lookup import Proposal

MODEL, LOOKUP = "model", "lookup"  # the draft sources


@dataclass(frozen=True)
class Plan:
    """What the next step does: draft up to `k` tokens (0: a plain step) from `source`, stop
    drafting after a token whose confidence is below `stop_below` (model drafts), and measure
    that confidence when `want_sure`."""

    k: int
    stop_below: float = 0.0
    want_sure: bool = False
    est_speedup: float | None = None  # expected speed vs plain decoding, from measured costs
    source: str = MODEL
    score: bool = False  # a plain step that first feeds the draft what it missed and scores it (scores)
    extend: bool = False  # while drafting, ask `extension` whether prompt lookup should finish the draft


@dataclass(frozen=True)
class StepOutcome:
    k: int  # draft tokens proposed this step (may be < the K asked for: drafting can stop early)
    n_accepted: int
    draft_s: float
    verify_s: float
    step_s: float
    sure: tuple[float, ...] = ()  # the draft's confidence in each drafted token (see Decoder._draft)
    source: str = MODEL  # where the drafts came from
    match: int = 0  # the length of the lookup proposal's matched n-gram (0: no proposal)
    shadow: tuple[int, int] = (0, 0)  # a proposal this step did not verify: (tokens scored, leading ones committed)
    catch_up_s: float = 0.0  # feeding the draft what it missed in plain or lookup steps (not in step_s)
    catch_up_n: int = 0  # how many tokens that was
    scores: tuple[float, ...] = ()  # per caught-up token: the probability a model draft of it was accepted
    bonus: float | None = None  # the same for the last step's bonus token, when its drafts were all accepted
    extended: int = 0  # of the k drafts, the last ones copied by prompt lookup after the model's (Plan.extend)
    extended_match: int = 0  # the matched n-gram length those followed
    # the proposals lookup would have made after the first one's break, within what the step
    # committed: (match, tokens scored, leading ones committed) each
    chained: tuple[tuple[int, int, int], ...] = ()

    def split(self) -> tuple[int, int, int, int]:
        """(own drafts, own accepted, copied, copied accepted): a draft lookup finished, per
        source (the copy is tested only where every own draft was accepted)."""
        own = self.k - self.extended
        return own, min(self.n_accepted, own), self.extended, max(0, self.n_accepted - own)


class Controller(Protocol):
    def plan(self, lag: int = 0, proposal: Proposal | None = None) -> Plan:
        """The next step's plan. `lag`: tokens the draft model would have to catch up first;
        `proposal`: what prompt lookup offers for this step (None: lookup is off)."""
        ...

    def observe(self, outcome: StepOutcome) -> None: ...

    def begin(self, max_tokens: int | None = None) -> None:
        """A new request of at most `max_tokens` starts (the engine keeps an adaptive controller across requests)."""
        ...

    def extension(self, proposal: Proposal, drafted: int) -> int:
        """For plans with `extend`: lookup tokens to end a draft of `drafted` model tokens with."""
        ...

    def drafting(self) -> bool:
        """Whether the request's first steps may draft from the model: if not, the draft model
        need not read the prompt at the start (it reads it when it is next needed)."""
        ...


class FixedK:
    """Always K draft tokens: from the draft model when there is one (a fixed `p_min` may
    still stop drafting early), else from prompt lookup when it has a proposal."""

    def __init__(self, k: int, p_min: float = 0.0, *, model: bool = True) -> None:
        if k < 0:
            raise ValueError("k must be >= 0")
        self.k = k
        self.model = model
        self._plan = Plan(k, stop_below=p_min, want_sure=p_min > 0.0)

    def plan(self, lag: int = 0, proposal: Proposal | None = None) -> Plan:
        if self.model:
            return self._plan
        if proposal is not None and proposal.tokens and self.k:
            return Plan(min(self.k, len(proposal.tokens)), source=LOOKUP)
        return Plan(0)

    def observe(self, outcome: StepOutcome) -> None:
        pass

    def begin(self, max_tokens: int | None = None) -> None:
        pass

    def extension(self, proposal: Proposal, drafted: int) -> int:
        return 0  # never asked: a fixed K's plans do not extend

    def drafting(self) -> bool:
        return self.model and self.k > 0
