"""Choosing K, the number of draft tokens per step.

A controller has two methods: `plan(lag)` before a step, which returns a
`Plan` (the K to draft, the in-step stop threshold, whether to measure the
draft's confidence), and `observe(outcome)` after it (the shape of
transformers' CandidateGenerator). `FixedK` always plans the same K; K = 0 is
plain decoding through the same loop.

`AdaptiveK` maximises expected tokens per second from what it measures on
this machine (DESIGN.md, "The K controller"):

    E(K)     = 1 + sum_{j<=K} prod_{i<=j} alpha_i     (alpha_i: acceptance at position i,
                                                       given the earlier ones were accepted)
    speed(K) = E(K) / (K * c_d + v(K+1) + o)          speed(0) = 1 / (v(1) + o)

Measured on real machines the step time is close to linear in K, with a fixed
part larger than one plain step (switching between two models' weights costs
cache), so the controller fits T(K) = fixed + K * per_token to the medians of
recent whole-step times for each K it tried, with the fixed part held between
one and SWITCH_MAX plain steps, and measures T(0) separately (`StepTimes`, one
per engine: a new temperature starts with the machine's costs known); alpha_i
are decayed counts, so the estimates follow the text as it changes.

Exploration: every `probe_every` steps it tries a neighbour of its best K, and
every fourth of those a plain step, so T(0), the yardstick for every decision,
stays fresh. When K = 0 wins it decodes plainly and probes a small K now and
then to notice when acceptance recovers: less often each time plain still wins
(up to RECOVER_MAX steps apart), soon again after a probe whose drafts were all
accepted, and only when the draft is nearly in step: a probe after a long plain
stretch first has to feed the draft every token it missed, so within one long
request a due probe waits for the next request (which starts in step) or for
OVERDUE_MAX more steps. Leaving plain decoding needs a predicted gain of
LEAVE_PLAIN.

Within a step, drafting stops after a token the draft is unsure of when that
pays: acceptance is also kept per bucket of the draft's confidence in its token
(SURE_EDGES), and `stop_threshold` finds the buckets where "this token and the
next both accepted" is worth less than one more draft token costs (the fitted
per-token slope). The plan carries that threshold; the decoder stops drafting
after a token whose confidence is below it. A pair's fixed `p_min` is a floor
under the same threshold (one rule, one meaning of "sure": the draft's
probability of the token it drafted, untempered at temperature 0).
Pure: no model, no clock, no I/O.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Protocol

from . import defaults
from .lookup import Proposal
from .lookup_policy import LookupPolicy
from .step_times import Recent, StepTimes

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


@dataclass(frozen=True)
class StepOutcome:
    k: int  # draft tokens proposed this step (may be < the K asked for: drafting can stop early)
    n_accepted: int
    draft_s: float
    verify_s: float
    step_s: float
    sure: tuple[float, ...] = ()  # the draft's confidence in each drafted token (see Decoder._draft)
    source: str = MODEL  # where the drafts came from
    match: int = 0  # lookup: the length of the matched n-gram


WARMUP = (0, 0, 2, 2, 5, 5, 0)
WARMUP_ACCEPTANCE = (4, 4)
LEAVE_PLAIN = 1.03  # predicted gain needed to leave plain decoding
LEAVE_PLAIN_LAGGING = 1.15  # ... when the draft first has to catch up more than CHEAP_LAG tokens
PLAIN_DECAY = 0.998  # how fast acceptance evidence ages over plain steps (drafting steps: `decay`)
RECOVER_MAX = 256  # longest wait between recovery probes while plain decoding wins
CHEAP_LAG = 16  # draft tokens to catch up that a recovery probe may pay without waiting
OVERDUE_MAX = 1024  # ... and how long it waits for that (a new request starts with the draft in step)
FOLLOW_UP = 4  # steps to the next recovery probe after one whose drafts were all accepted
SHRINK = 8.0  # pseudo-counts pulling a per-position or per-bucket rate towards the pooled one
SURE_EDGES = (0.1, 0.3, 0.6, 0.9)  # buckets of the draft's confidence in a drafted token
ALWAYS = 1.01  # a threshold above every confidence: stop after each token


class Controller(Protocol):
    def plan(self, lag: int = 0, proposal: Proposal | None = None) -> Plan:
        """The next step's plan. `lag`: tokens the draft model would have to catch up first;
        `proposal`: what prompt lookup offers for this step (None: lookup is off)."""
        ...

    def observe(self, outcome: StepOutcome) -> None: ...


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


class AdaptiveK:
    def __init__(
        self,
        k_max: int = defaults.K_MAX,
        *,
        probe_every: int = 8,
        recover_every: int = 32,
        decay: float = 0.985,
        prior_alpha: float = 0.6,
        times: StepTimes | None = None,
        p_min: float = 0.0,
        model: bool = True,
    ) -> None:
        self.k_max = k_max
        self.model = model  # a draft model is there (else only lookup, or plain steps)
        self.p_min = p_min  # a floor under the learned stop threshold (a pair option)
        self.probe_every = probe_every
        self.recover_every = recover_every
        self.decay = decay
        self.prior_alpha = prior_alpha
        # decayed counts of draft tokens tried / accepted at each position
        self._tried = [0.0] * k_max
        self._accepted = [0.0] * k_max
        # ... and per bucket of the draft's confidence in the token (SURE_EDGES)
        self._sure_tried = [0.0] * (len(SURE_EDGES) + 1)
        self._sure_accepted = [0.0] * (len(SURE_EDGES) + 1)
        self.times = times if times is not None else StepTimes(k_max)
        if self.times.k_max != k_max:
            raise ValueError("the shared step times were made for another k_max")
        self.lookup = LookupPolicy(self.times.verify)
        # with the costs already known (another temperature measured them) only acceptance
        # is new: two draft steps measure it
        self._warmup = WARMUP_ACCEPTANCE if self.times.measured() else WARMUP
        self.steps = 0
        self._speeds: list[float] | None = None
        self._speeds_at = -1  # times.clock when _speeds (and _cost) were computed
        self._cost = (0.0, 0.0)
        self._probes = 0
        self._plain = False  # plain decoding chosen (not a probe)
        self._recover_gap = recover_every
        self._recover_at = 0
        self._spec_since = 0

    # -- the model -------------------------------------------------------------------------
    def pooled(self) -> float:
        """Acceptance over all positions (the prior before any draft token was verified)."""
        tried = sum(self._tried)
        return sum(self._accepted) / tried if tried > 0 else self.prior_alpha

    def _shrunk(self, accepted: list[float], tried: list[float]) -> list[float]:
        pooled = self.pooled()
        return [(a + SHRINK * pooled) / (t + SHRINK) for a, t in zip(accepted, tried)]

    def alpha(self) -> list[float]:
        """Acceptance per position, each shrunk towards the pooled rate (positions far out
        are tried less often; the pooled rate is the best guess for them)."""
        return self._shrunk(self._accepted, self._tried)

    def sure_acceptance(self) -> list[float]:
        """Acceptance of a drafted token per bucket of the draft's confidence in it, each
        shrunk towards the pooled rate."""
        return self._shrunk(self._sure_accepted, self._sure_tried)

    def stop_threshold(self, best: int) -> float:
        """The confidence below which drafting should stop after a token. One more draft
        token costs `per_token` seconds and pays only if this token and the next are both
        accepted, each accepted token being worth 1/speed seconds; a confidence bucket
        where that expectation falls short stops the draft (its token is still verified:
        the rule looks at the draft's side only, so it does not change the output). The
        threshold is the top edge of the highest such bucket, which assumes acceptance
        grows with confidence (it does, measured: 0.45 to 0.96 on the Q2_K pair)."""
        if best < 0:
            return 0.0
        pooled = self.pooled()
        need = self.step_cost()[1] * self.speed(best)
        edge = 0.0
        for upper, a in zip((*SURE_EDGES, ALWAYS), self.sure_acceptance()):
            if a * pooled < need:
                edge = upper
        return edge

    def expected_tokens(self, k: int, alpha: list[float] | None = None) -> float:
        alpha = alpha if alpha is not None else self.alpha()
        e, run = 1.0, 1.0
        for i in range(k):
            run *= alpha[i]
            e += run
        return e

    @property
    def step_time(self) -> list[Recent]:
        return self.times.by_k

    def step_cost(self) -> tuple[float, float]:
        self.speeds()  # fitted once per observation, with the speeds
        return self._cost

    def speeds(self) -> list[float]:
        """Expected tokens per second for K = 0..k_max (kept until the next observation, this
        controller's or another's on the shared times: the decoder asks twice per step)."""
        if self._speeds is None or self._speeds_at != self.times.clock:
            self._speeds_at = self.times.clock
            alpha = self.alpha()
            self._cost = fixed, per_token = self.times.fit()
            times = [self.step_time[0].value] + [fixed + per_token * k for k in range(1, self.k_max + 1)]
            self._speeds = [self.expected_tokens(k, alpha) / t if t > 0 else 0.0 for k, t in enumerate(times)]
        return self._speeds

    def speed(self, k: int) -> float:
        return self.speeds()[k]

    def best_k(self) -> int:
        if not self.step_time[0].n or not any(r.n for r in self.step_time[1:]):
            return -1  # not measured yet
        speeds = self.speeds()
        return max(range(self.k_max + 1), key=speeds.__getitem__)

    def estimated_speedup(self) -> float | None:
        best = self.best_k()
        plain = self.speed(0) if best >= 0 else 0.0
        return self.speed(best) / plain if plain > 0 else None

    # -- the protocol ------------------------------------------------------------------------
    def plan(self, lag: int = 0, proposal: Proposal | None = None) -> Plan:
        """The next step's plan. `lag`: tokens the draft would have to catch up first (it sat
        out plain steps); a recovery probe waits for a moment when that is cheap. A lookup
        `proposal` is taken instead of the model's plan when its expected speed is higher."""
        self.steps += 1
        if not self.model:
            return self._lookup_or(Plan(0), proposal, self.lookup.plain_speed())
        best = self.best_k()
        stop_below = self.stop_threshold(best) if self.steps > len(self._warmup) else 0.0
        k = self._next_k(best, lag)
        plan = Plan(k, max(stop_below, self.p_min), want_sure=True, est_speedup=self.estimated_speedup())
        if self.steps <= len(self._warmup) or best < 0:
            return plan  # the model's costs are being measured
        return self._lookup_or(plan, proposal, self.speed(k) if k > 0 else self.lookup.plain_speed())

    def _lookup_or(self, plan: Plan, proposal: Proposal | None, speed: float) -> Plan:
        """The lookup draft when it is expected to be faster than `plan` (at `speed`)."""
        if proposal is None or not proposal.tokens:
            return plan
        k, lookup_speed = self.lookup.best(proposal.n, len(proposal.tokens))
        if k == 0 or lookup_speed <= speed:
            return plan
        plain = self.lookup.plain_speed()
        return Plan(k, source=LOOKUP, est_speedup=lookup_speed / plain if plain > 0 else None)

    def _next_k(self, best: int, lag: int) -> int:
        if best > 0 and self._plain:
            # leaving plain decoding first feeds the draft every token it missed: only for a
            # clear gain, and with a long catch-up only for a large one (else at the next
            # request, which starts with the draft in step)
            gain = self.speed(best) / self.speed(0)
            if gain < LEAVE_PLAIN or (lag > CHEAP_LAG and gain < LEAVE_PLAIN_LAGGING):
                best = 0
        if self.steps <= len(self._warmup):
            # measure plain steps and two draft sizes (each twice: a new batch shape's first
            # call is slow) before trusting the model; cheap even if the pair is bad
            return min(self.k_max, self._warmup[self.steps - 1])
        if best <= 0:
            if not self._plain:
                self._plain, self._recover_at = True, self.steps + self._recover_gap
            due = self.steps >= self._recover_at
            if not due or (lag > CHEAP_LAG and self.steps < self._recover_at + OVERDUE_MAX):
                return 0
            # speculation does not pay now: probe a small K to see if it recovers, less often
            # each time it still does not pay; a probe whose drafts were all accepted is
            # followed up soon (observe)
            self._recover_gap = min(RECOVER_MAX, 2 * self._recover_gap)
            self._recover_at = self.steps + self._recover_gap
            self._probes += 1
            return min(self.k_max, 1 + self._probes % 2)
        if self._plain:
            self._plain, self._spec_since = False, self.steps
        elif self.steps - self._spec_since >= self.recover_every:
            self._recover_gap = self.recover_every  # speculation held: a later fall-back starts afresh
        if self.steps % self.probe_every:
            return best
        # keep the neighbours' estimates fresh, and now and then the plain step's time (the
        # yardstick for everything else: a stale or unlucky one misleads every decision)
        self._probes += 1
        return (min(self.k_max, best + 1), max(1, best - 1), min(self.k_max, best + 1), 0)[self._probes % 4]

    def observe(self, o: StepOutcome) -> None:
        self._speeds = None
        self.times.verify.add(o.k + 1, o.verify_s)
        if o.source == LOOKUP:
            # a free draft: its own acceptance record; the model's step costs and acceptance
            # describe model drafts only
            self.lookup.observe(o.match, o.k, o.n_accepted, o.verify_s, o.step_s)
            return
        self.lookup.idle(o.step_s, o.verify_s, plain=o.k == 0)
        if o.k > 0 and self._plain and o.n_accepted == o.k:
            self._recover_at = min(self._recover_at, self.steps + FOLLOW_UP)
        # every step ages the evidence, plain ones slowly: after a long plain stretch what the
        # recovery probes see outweighs what came before, yet no single probe decides alone
        d = self.decay if o.k > 0 else PLAIN_DECAY
        self._tried = [t * d for t in self._tried]
        self._accepted = [a * d for a in self._accepted]
        self._sure_tried = [t * d for t in self._sure_tried]
        self._sure_accepted = [a * d for a in self._sure_accepted]
        for i, sure in enumerate(o.sure[: o.n_accepted + 1]):  # tokens after a rejection are not verified
            b = bisect.bisect_right(SURE_EDGES, sure)
            self._sure_tried[b] += 1.0
            self._sure_accepted[b] += i < o.n_accepted
        if o.k > 0:
            for i in range(min(o.n_accepted + 1, o.k)):
                self._tried[i] += 1.0
                self._accepted[i] += i < o.n_accepted
        self.times.add(o.k, o.step_s)
