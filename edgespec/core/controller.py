"""Choosing K, the number of draft tokens per step.

A controller has two methods: `plan(lag, proposal)` before a step, which returns a `Plan`
(the K to draft, the in-step stop threshold, ...), and `observe(outcome)` after it (as in
transformers' CandidateGenerator). `FixedK` plans one K; K = 0 is plain decoding.

`AdaptiveK` maximises expected tokens per second from what it measures on
this machine (docs/controller.md):

    E(K)     = 1 + sum_{j<=K} prod_{i<=j} alpha_i     (alpha_i: acceptance at position i,
                                                       given the earlier ones were accepted)
    speed(K) = E(K) / (K * c_d + v(K+1) + o)          speed(0) = 1 / (v(1) + o)

It assumes nothing about the machine. The denominator is T(K), the whole-step time
measured per K (`StepTimes.curve`: the median per K, made non-decreasing, a line between
measured K, past the largest the last measured stretch's rise, at least the draft's own
per-token cost: optimistic where the curve was flat, so the controller steps up to half
as far again to measure it, `StepTimes.reach`). Any shape is learnt that way: a CPU's
line, a GPU's flat-then-rising verify, a fixed cost for switching models, rebuilds after
a change of K (`best_k` then keeps its K for small gains). K goes up to k_max (defaults.K_MAX
= 32). One `StepTimes` per engine: a new temperature starts with the machine's costs known.
alpha_i (`Acceptance`, kept apart where lookup finds a copy: `ByContext`) follow the text: a
long memory, and a change test that jumps to a turned text within a few steps.

Exploration: every PROBE_EVERY steps (fewer where a change of K costs a rebuild) it tries a
neighbour of its best K (first, any K not yet timed that might beat it: `StepTimes.untimed`),
every fourth a plain step, so T(0) stays fresh. When K = 0 wins it decodes plainly and now and
then plans a scored catch-up (`Plan.score`): the decoder feeds the draft the tokens it missed
(Decoder._catch_up) and scores each with the chance a draft of it would have been accepted.
The next comes when the last check's cost would be PROBE_BUDGET of the plain steps since
(while a return has paid, `_paid`, its fixed part alone), none where drafts all accepted
until max_tokens would not repay it (`begin`). Without scores (penalties or a grammar) it
probes K = 1 or 2, spaced alike, and at once after a probe whose drafts were all accepted.
Leaving plain needs a gain of LEAVE_PLAIN.

Within a step, drafting stops after a token the draft is unsure of when that pays:
acceptance is also kept per bucket of the draft's confidence in its token (SURE_EDGES),
and `stop_threshold` finds the buckets where "this token and the next both accepted" is
worth less than one more draft token costs (the curve's local step per K). The decoder
stops drafting after a token whose confidence ("sure": the draft's probability of its token,
untempered at T = 0) is below the plan's threshold, or a pair's fixed `p_min`.
Pure: no model, no clock, no I/O.
"""

from __future__ import annotations

import math

from . import defaults
from .acceptance import SURE_EDGES, ByContext
from .lookup import Proposal
from .lookup_policy import DECAY as LOOKUP_DECAY
from .lookup_policy import LookupPolicy
from .plans import LOOKUP, MODEL, Controller, FixedK, Plan, StepOutcome
from .step_times import StepTimes

__all__ = ["LOOKUP", "MODEL", "AdaptiveK", "Controller", "FixedK", "Plan", "StepOutcome", "StepTimes"]

WARMUP = (0, 0, 2, 2, 4, 4)  # plain steps and two draft sizes, each twice (a new batch shape's first call is slow)
WARMUP_ACCEPTANCE = (4, 4)  # with the costs already known only acceptance is new
PROBE_EVERY = 8  # a neighbour of the best K every 8 steps: near the best, a probe costs little
PROBE_BUDGET = 0.03  # while plain wins, what scored catch-ups or recovery probes aim to cost (share of time)
LEAVE_PLAIN = 1.03  # predicted gain needed to leave plain decoding (the draft must catch up first)
STAY = 32  # steps a new K is expected to hold: the acceptance it rests on has a memory of ~50 drafting steps
ALWAYS = 1.01  # a threshold above every confidence: stop after each token


class AdaptiveK:
    def __init__(
        self,
        k_max: int = defaults.K_MAX,
        *,
        prior_alpha: float = 0.6,
        times: StepTimes | None = None,
        p_min: float = 0.0,
        model: bool = True,
    ) -> None:
        self.k_max = k_max
        self.model = model  # a draft model is there (else only lookup, or plain steps)
        self.p_min = p_min  # a floor under the learned stop threshold (a pair option)
        self.acc = ByContext(k_max, prior_alpha)  # the model's acceptance, apart where lookup finds a copy
        self.times = times if times is not None else StepTimes(k_max)
        if self.times.k_max != k_max:
            raise ValueError("the shared step times were made for another k_max")
        self.lookup = LookupPolicy(self.times.verify)
        self._warmup = WARMUP_ACCEPTANCE if self.times.measured() else WARMUP
        self.steps, self._seen, self._probes = 0, 0, 0
        self._speeds: list[float] | None = None
        # own observations and the acceptance record when _speeds was computed (and _curve, the costs it used)
        self._speeds_at: tuple[int, object] = (-1, None)
        self._curve: list[float] = []
        self._plain, self._recover_at = False, 0  # plain decoding chosen (not a probe); when to check it
        self._lookup_share = 0.0  # the share of recent steps lookup would take from a caught-up model
        self._score = False  # the next plain step catches the draft up and scores what it missed
        self._unscored = False  # the last scored catch-up came back without scores: probe instead
        self._asked = False  # the last plan asked for a scored catch-up
        self._stretch = (0, 0.0)  # tokens and seconds of model steps since plain decoding was left
        self._credit, self._fed = 0.0, 0  # the last stretch's saving less the checks since; the last check's size
        self._left: int | None = None  # tokens the request may still produce (begin), None: not told

    @property
    def _paid(self) -> bool:
        """Drafting's last stretch saved enough for the next check, after those since (the Q2_K pair
        at T = 1.0, charged the fixed part after a stretch that barely paid, spent 14% on checks)."""
        return self._credit > self._check_cost()

    def _check_cost(self) -> float:
        """A scored catch-up's whole cost: the last one's size, timed (else a typical catch-up)."""
        c = self.times.catch_up
        return self.times.scored.cost(self._fed) if self._fed else c.value if c.n else self.times.draft_slope()

    # -- the model -------------------------------------------------------------------------
    def pooled(self) -> float:
        return self.acc.now.pooled()

    def alpha(self) -> list[float]:
        return self.acc.now.alpha()

    def sure_acceptance(self) -> list[float]:
        return self.acc.now.by_sure()

    def expected_tokens(self, k: int, alpha: list[float] | None = None) -> float:
        alpha = alpha if alpha is not None else self.alpha()
        e, run = 1.0, 1.0
        for i in range(k):
            run *= alpha[i]
            e += run
        return e

    def step_costs(self) -> list[float]:
        """Estimated seconds of a step at K = 0..reach + 1 (StepTimes.curve)."""
        self.speeds()
        return self._curve

    def speeds(self) -> list[float]:
        """Expected tokens per second for K = 0..reach + 1 (kept until this controller's next
        observation, a change of acceptance record, or a move of the shared step-cost curve)."""
        curve = self.times.curve()  # the same list until the costs move
        if self._speeds is None or self._speeds_at != (self._seen, self.acc.now) or curve is not self._curve:
            self._speeds_at = (self._seen, self.acc.now)
            self._curve = curve
            alpha = self.alpha()
            e, run, self._speeds = 1.0, 1.0, []
            for k, t in enumerate(self._curve):
                if k:
                    run *= alpha[k - 1]
                    e += run
                self._speeds.append(e / t if t > 0 else 0.0)
        return self._speeds

    def speed(self, k: int) -> float:
        return s[k] if k < len(s := self.speeds()) else 0.0  # past reach + 1: not a candidate

    def best_k(self) -> int:
        """The fastest K up to `reach()` past the largest measured (the cost extrapolated: stepping
        there is how the range grows) and past the deepest position drafted (`Acceptance.reach`). Where
        a change of K costs rebuilds, the last step's K stays unless the best repays two within STAY steps."""
        if not self.times.measured():
            return -1  # not measured yet
        top = min(self.times.reach(), self.acc.now.reach())
        speeds, last, r = self.speeds(), self.times.last_k, self.times.reshape()
        best = max(range(top + 1), key=speeds.__getitem__)
        stay = r > 0 and best > 0 and 0 < last <= top and speeds[last] * (1 + 2 * r / STAY) >= speeds[best]
        return last if stay else best

    def estimated_speedup(self, best: int | None = None) -> float | None:
        best = self.best_k() if best is None else best
        plain = self.speed(0) if best >= 0 else 0.0
        return self.speed(best) / plain if plain > 0 else None

    def stop_threshold(self, best: int) -> float:
        """The confidence below which drafting stops after a token. One more draft token costs
        the curve's local step per K and pays only if this token and the next are both accepted,
        each worth 1/speed seconds; a confidence bucket where that falls short stops the draft
        (its token is still verified: the draft's side only, the output is unchanged). The top
        edge of the highest such bucket (acceptance grows with confidence: 0.45 to 0.96, Q2_K)."""
        if best < 1:
            return 0.0
        curve = self.step_costs()
        # the local cost of one more token, never above a draft token's share of the step
        step = max(curve[best] - curve[best - 1], self.times.draft_slope())
        need = min(step, (curve[best] - curve[0]) / best) * self.speed(best)
        pooled, edge = self.pooled(), 0.0
        for upper, a in zip((*SURE_EDGES, ALWAYS), self.sure_acceptance()):
            if a * pooled < need:
                edge = upper
        return edge

    # -- the protocol ------------------------------------------------------------------------
    def plan(self, lag: int = 0, proposal: Proposal | None = None) -> Plan:
        """The next step's plan. `lag`: tokens the draft would have to catch up first (its
        measured cost counts in a recovery probe's). A lookup `proposal` is taken instead
        when its expected speed beats the model's with the catch-up of `lag` tokens paid,
        and plain decoding's (a copy costs no draft time; once lookup no longer beats
        plain, the lag stops counting against the model and it comes back)."""
        self.steps += 1
        self.acc.use(proposal.n if proposal is not None else 0)  # the record the step is judged on
        if not self.model:
            return self._lookup_or(Plan(0), self._offer(proposal, (0.0, 0.0)), self.lookup.plain_speed())
        best = self.best_k()
        warming = self.steps <= len(self._warmup)
        k = min(self.k_max, self._warmup[self.steps - 1]) if warming else self._next_k(best, lag)
        # a probe drafts all its tokens (it measures a K), as does every step where a shorter verify costs a rebuild
        stop_below = self.stop_threshold(k) if k == best and not (warming or self.times.reshape()) else 0.0
        extend = proposal is not None and k == best > 0 and not (warming or self._plain)  # probes measure a K
        plan = Plan(k, max(stop_below, self.p_min), True, self.estimated_speedup(best), extend=extend)
        if self._score:
            self._score = False
            plan = Plan(0, score=True, est_speedup=plan.est_speedup)
            self._asked = True
        if warming or best < 0:
            return plan  # the model's costs are being measured
        # lookup must beat plain too (else it beats a lag-charged model forever); both pay what they add to a catch-up
        feed = (self.times.feed_fixed() if lag <= 1 else 0.0, self.times.feed_slope())
        offer = self._offer(proposal, feed)
        # how often lookup would take a step from a caught-up model: what a catch-up of the draft
        # buys is the model steps until then (counted whatever was chosen: the share of steps
        # lookup did take grows while the model sits out, and with it the charge that keeps it out)
        plain = self.lookup.plain_speed(*feed)
        wins = offer[0] > 0 and offer[1] > max(self.speed(best), plain)
        self._lookup_share = LOOKUP_DECAY * self._lookup_share + (1 - LOOKUP_DECAY) * wins
        stay = max(self.speed(0), self.lookup.draftless_speed(feed[1]) if lag >= 2 else 0.0)
        late = lag >= 2 and self._late(self.times.feed_cost(lag))  # one missed token rides in the step
        if k > 0 and not self._plain and (self._model_speed(k, lag, self._lookup_share) < stay or late):
            # not worth feeding the draft what it missed: lookup will soon take over again, the steps it
            # sat out gave more, or the answer ends first (a probe too: it can wait for a step without a lag)
            plan = Plan(0)
        if not offer[0]:
            return plan
        alternative = max(self._model_speed(k, lag, self._lookup_share) if plan.k else 0.0, plain)
        chosen = self._lookup_or(plan, offer, alternative)
        if plan.score and not chosen.score:
            self._score, self._asked = True, False  # a lookup step took its place: score at the next plain step
        elif self._plain and plan.k and chosen.source == LOOKUP:
            self._recover_at = self.steps + 1  # and the same for a recovery probe
        return chosen

    def begin(self, max_tokens: int | None = None) -> None:
        """A new request of at most `max_tokens`: plain decoding left from the last one is checked at once."""
        self._left, self._recover_at = max_tokens, self.steps + 1 if self._plain and self._paid else self._recover_at

    def drafting(self) -> bool:
        """False while plain decoding wins and nothing is due next: the draft reads a prompt later."""
        return self.model and (not self._plain or self._recover_at <= self.steps + 1)

    def extension(self, proposal: Proposal, drafted: int) -> int:
        """How many of lookup's `proposal` tokens should end a model draft of `drafted` tokens
        (Plan.extend: asked after each model token). Looked-up tokens cost no draft time, a longer
        verify, and (each one accepted) a later catch-up of the draft, its fixed part paid once any
        is accepted; taken where the step's tokens/s with them beat the model's best up to the last K
        the costs reach (not its plan's K, which how deep it drafted may hold: copies ending each draft
        kept the demo model at K = 7-15 on GPU-like costs, 26-32 alone, bench-history stop 64).
        Lossless: a looked-up token is a function of the tokens before it (q one-hot)."""
        best = self.best_k()
        if best <= 0 or drafted >= best:
            return 0
        alpha, curve, verify = self.alpha(), self.step_costs(), self.times.verify.cost
        sure = self.expected_tokens(drafted, alpha)  # tokens expected from the drafts so far
        reach = math.prod(alpha[:drafted])  # the chance they are all accepted
        model = max(self.speeds()[best:])  # the model drafts on: as fast as it could (docstring)
        # or lookup copies j tokens: no draft time, a longer verify, and each copied token
        # accepted must still be fed to the draft before it drafts again
        base = curve[drafted] - verify(drafted + 1)
        tax, fixed = self.times.feed_slope(), self.times.feed_fixed()
        take, copied, run, gain, first = 0, 0.0, reach, 0.0, 0.0
        for j, a in enumerate(self.lookup.alpha(proposal.n)[: len(proposal.tokens)], start=1):
            run *= a
            gain += run
            first = first or run  # the chance a copied token is accepted: the draft then lags by two or more
            t = base + verify(drafted + j + 1) + gain * tax + first * fixed
            if t > 0 and (sure + gain) / t > copied:
                take, copied = j, (sure + gain) / t
        return take if copied > model else 0

    def _late(self, cost: float) -> bool:
        """Too late to pay `cost` (feeding the draft what it missed): the rest of the answer, all
        drafted and accepted, would save less (a rename at T = 0 fed 59 for its last step: 258 ms)."""
        return self._left is not None and self._left * self.times.best_saving() <= cost

    def _model_speed(self, k: int, lag: int, share: float) -> float:
        """speed(k) when the draft must first be fed the `lag` tokens it missed (lookup or
        plain steps). The catch-up buys the model steps until lookup takes over again, about
        1 / `share` of them (the share of recent steps lookup would take from a caught-up
        model), so only that share of it is charged: none where lookup does not copy. Charged
        whole, a lag grown over a copy kept the model out after it (rename at T = 0: 150 plain
        and one-token lookup steps where the model drafts 6 of 6)."""
        costs = self.step_costs()
        t = costs[k] if k < len(costs) else 0.0
        if lag < 2 or t <= 0:  # the decoder feeds one missed token inside the step
            return self.speed(k)
        return self.speed(k) * t / (t + share * self.times.feed_cost(lag))

    def _offer(self, proposal: Proposal | None, feed: tuple[float, float]) -> tuple[int, float]:
        """(k, expected tokens per second) of lookup's best draft from `proposal`; `feed`: what
        it adds to the draft's next catch-up, (fixed, per token), see LookupPolicy.best."""
        if proposal is None or not proposal.tokens:
            return 0, 0.0
        return self.lookup.best(proposal.n, len(proposal.tokens), *feed)

    def _lookup_or(self, plan: Plan, offer: tuple[int, float], speed: float) -> Plan:
        """The lookup draft `offer` (k, speed) when it is expected to be faster than `plan` (at `speed`)."""
        k, lookup_speed = offer
        if k == 0 or lookup_speed <= speed:
            return plan
        plain = self.lookup.plain_speed()
        return Plan(k, source=LOOKUP, est_speedup=lookup_speed / plain if plain > 0 else None)

    def _score_gap(self) -> int:
        """Plain steps until the next scored catch-up: enough that the last one's cost (while a
        return has paid, its fixed part: see the module docstring) would be PROBE_BUDGET of
        their time. Charged whole, each gap grows with the catch-up before it: where drafting
        has not paid, checks soon stop."""
        t0, fixed = self.step_costs()[0], self.times.catch_up_fixed() if self._paid else None
        loss = fixed if fixed is not None else self._check_cost()
        return max(1, math.ceil(loss / (PROBE_BUDGET * t0))) if t0 > 0 else 1

    def _probe_gap(self, k: int) -> int:
        """Plain steps between recovery probes of K = k, so that probing costs PROBE_BUDGET
        of the time: a probe loses what its step and the draft's catch-up cost beyond the
        plain steps that would have given its expected tokens."""
        t0, tk = self.step_costs()[0], self.step_costs()[k] * (1 + 3 * self.times.reshape())  # and its rebuilds
        loss = tk + self.times.catch_up.value - self.expected_tokens(k) * t0
        return max(1, math.ceil(loss / (PROBE_BUDGET * t0))) if t0 > 0 else 1

    def _next_k(self, best: int, lag: int) -> int:
        if best > 0 and self._plain and self.speed(best) < LEAVE_PLAIN * self.speed(0):
            best = 0  # leaving plain decoding first feeds the draft every token it missed
        if best <= 0:
            probe = min(self.k_max, 1 + self._probes % 2)
            if not self._plain:
                n, t = self._stretch  # what it saved (one lucky step rarely pays for a check)
                self._credit, self._stretch = min(self._credit, 0.0) + n * self.step_costs()[0] - t, (0, 0.0)
                self._plain, self._recover_at = True, self.steps + self._score_gap()
            if self.steps < self._recover_at:
                return 0
            if self._late(self.times.check_cost(lag)):
                return 0  # all accepted from here to max_tokens, a return would not repay the check's catch-up
            if lag > 0 and not self._unscored:
                # feed the draft what it missed and score each token: a test of the text at
                # the price of the catch-up alone (a probe follows if the decoder cannot score)
                self._score = True
                self._recover_at = self.steps + self._score_gap()
                return 0
            self._unscored = False
            # speculation does not pay now: probe a small K now and then to notice when the
            # text turns (a probe whose drafts were all accepted is followed at once: observe)
            self._probes += 1
            self._recover_at = self.steps + self._probe_gap(probe)
            return probe
        self._plain = False
        if self.steps % self.times.probe_every(PROBE_EVERY, PROBE_BUDGET):
            return best
        # keep the neighbours' costs fresh, and now and then the plain step's time (the
        # yardstick for everything else: a stale or unlucky one misleads every decision)
        self._probes += 1
        k = (min(self.k_max, best + 1), max(1, best - 1), min(self.k_max, best + 1), 0)[self._probes % 4]
        return k and self.times.untimed(self.expected_tokens, self.speed(best), self.acc.now.reach()) or k

    def observe(self, o: StepOutcome) -> None:
        self._seen += 1
        self._left = None if self._left is None else self._left - o.n_accepted - 1
        self.times.verify.add(o.k + 1, o.verify_s)
        if o.source == LOOKUP:
            # a free draft: its own acceptance record; the model's step costs and acceptance
            # describe model drafts only
            self.lookup.observe(o.match, o.k, o.n_accepted, o.verify_s, o.step_s)
            return
        own, own_accepted, copied, copied_accepted = o.split()  # a draft lookup finished: each part to its source
        copy_scored = copied and own_accepted == own
        self.lookup.shadowed(o.match, o.shadow, o.chained)
        self.lookup.idle(o.step_s, o.verify_s, plain=o.k == 0, fade=not (o.shadow[0] or o.chained or copy_scored))
        if o.bonus is not None:
            self.acc.now.observe_bonus(o.bonus)
        if o.scores:
            self.acc.now.observe_scores(o.scores)
        elif self._asked:
            self._unscored, self._recover_at = True, self.steps + 1  # not scored (constraints): probe next
        self._asked = False
        if copy_scored:
            self.lookup.record(o.extended_match, copied, copied_accepted, fade=not o.shadow[0])
        if own > 0:
            self.acc.now.observe(own, own_accepted, o.sure[:own])
            if self._plain and o.n_accepted == o.k:
                self._recover_at = self.steps + 1
        if not self._plain:
            n, t = self._stretch
            self._stretch = (n + o.n_accepted + 1, t + o.step_s + o.catch_up_s)
        if o.catch_up_n > 0 and o.k:  # what a lag added to the draft's first call (zeros count too)
            self.times.fed.add(o.catch_up_n, o.catch_up_s)
        elif o.catch_up_n > 0:  # a check of plain decoding: a call of its own
            self.times.catch_up.add(o.catch_up_s)
            if o.scores:  # with what its step took beyond a plain one (the switch back to the target)
                cost = o.catch_up_s + max(0.0, o.step_s - self.times.plain)
                self.times.scored.add(o.catch_up_n, cost)
                self._credit, self._fed = self._credit - cost, o.catch_up_n
                # the next check's gap, planned before this one's cost was known, is this one's
                self._recover_at = max(self._recover_at, self.steps + self._score_gap())
        if not o.extended:  # a step lookup finished is no K's cost (its target pass is in `verify`)
            self.times.add(o.k, o.step_s, o.draft_s)
