"""Acceptance of model drafts, kept so that it follows the text within a few steps.

Per position i, alpha_i is the rate at which a drafted token is accepted given that
the ones before it were: decayed counts (DECAY per drafting step), each position's
rate shrunk towards the pooled one (far positions are tried less often). Steady text
then gets a long, precise memory; a turn of the text (prose to code and back) is
caught by a test rather than by forgetting fast: when the acceptance of the last one
to CHANGE_WINDOW steps is implausible under the current estimate (a bound on its
binomial tail below CHANGE_LEVEL), the evidence before them is scaled down to the weight of one
token, so the estimate jumps to the new text at once instead of drifting
there over dozens of steps. The estimate tested against is kept off 0 and 1 (`_expected`):
on code at T = 0 a run of drafts all accepted made the first rejection a turn, and K fell
from 22 to 3 where the next drafts were all accepted again.

While the controller decodes plainly the evidence comes as scores instead
(`observe_scores`): each token the draft missed, scored with the probability that a
draft of it would have been accepted. A batch is tested as a whole against the estimate
from before it, for its worst-fitting run of recent tokens, so the first batch after
the text turned easy moves the estimate there. The runs in a batch also tell the
later positions (a draft from any token of it is accepted up to its next miss): on
held-out switching text (seeds 1001-1004) 1.107x -> 1.117x the best fixed K (min 1.089x ->
1.113x), steady text unchanged; on seeds 2001-2016 switching 1.106x -> 1.103x (min 1.026x ->
1.031x), steady-0.6's min 0.961x -> 0.949x; make bench's cells on fixed per-call costs
unchanged (their plain stretches are few): neutral where measured, kept because the far
positions' rates are then the text's own rather than the pooled rate.

After a step whose drafts were all accepted, its bonus token is scored the same way
(`observe_bonus`): one more position tried in that step, fractionally accepted.

Also per bucket of the draft's confidence in its token (SURE_EDGES): the evidence
behind the in-step stop rule. Pure: no model, no clock, no I/O.

Tried and not kept (bench --simulate, 30 tuning machines and the 4 held out): testing
the last steps against the estimate from before them rather than the current one (which
each step of a turned text already pulls its way). Both ways it fired about 3x as often
on steady text (a drop on steady text sends the controller to plain decoding, slow to
leave); a two-sample test did not, but was too weak after a turn, when the estimate
rests on a few tokens; doing it for rises only moved switching text from 1.07 to 1.08x
the best fixed K (median of 30), steady text unchanged. What the switching profile
loses was the return to easy text while decoding plainly: the probes' spacing
(PROBE_BUDGET) and a probe that happens to be rejected, not this test. Scoring the
plain stretch at each catch-up (observe_scores) took that on: switching text 1.06x ->
1.10x the best fixed K (median of 16 machines from seeds 2001-2016), steady unchanged.
Tried after it, no better on the tuning machines: a change window of 12 or 16 steps
(switching 1.09 -> 1.09, steady-0.6 0.99 -> 0.97); after a batch that hints at a turn
(tail < 0.05) without proving it, staying plain and scoring again 3 steps or half a
batch later (switching 1.09 -> 1.06 / 1.08); scoring only the last 32 rows (1.09 ->
1.08); memory per token tried instead of per step (DECAY or 0.99 per token: switching
1.09 -> 1.08, steady-0.6 0.99 -> 0.98 / 1.00). Holding the recent steps to Laplace's rate
((accepted + 1) / (tried + 2), so that a few drafts all accepted do not make the first
rejection a turn, as on code at T = 0.8 after the warm-up): held-out switching 1.103 ->
1.096x, steady unchanged, the demo's rename at T = 0 on virtual costs 39.1 -> 33.1 tok/s.
Testing against Jeffreys' mean (accepted + 0.5) / (tried + 1) rather than only bounding the
estimate with it: held-out switching 1.103 -> 1.100x (docs/bench-history.md, stop 38).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence

from .step_times import half_again

DECAY = 0.98  # per drafting step: ~50 steps of memory, enough for a rate within a few % on steady text
SHRINK = 4.0  # pseudo-counts pulling a per-position or per-bucket rate towards the pooled one
CHANGE_WINDOW = 8  # steps a turn may take to show: enough tokens tried even when few are accepted
CHANGE_LEVEL = 1e-3  # a false alarm about once in a thousand steps on steady text
SURE_EDGES = (0.1, 0.3, 0.6, 0.9)  # buckets of the draft's confidence in a drafted token
COPY_MATCH = 8  # a copy held this long: its next tokens were kept 0.87-0.92 of the time (4 held: 0.81)


def binomial_tail(n: float, x: float, p: float) -> float:
    """A bound on the probability of a count as far from n * p as x is, on x's side:
    exp(-n KL(x/n || p)) (Chernoff; exact when x is 0 or n, a little above the tail else)."""
    if n == 0:
        return 1.0
    p = min(max(p, 1e-6), 1 - 1e-6)
    q = x / n
    kl = (q * math.log(q / p) if q > 0 else 0.0) + ((1 - q) * math.log((1 - q) / (1 - p)) if q < 1 else 0.0)
    return math.exp(-n * kl)


class Acceptance:
    def __init__(self, positions: int, prior: float = 0.6, base: Acceptance | None = None) -> None:
        self.prior = prior
        self.base = base  # a record whose pooled rate this one's leans on (SHRINK tokens' worth)
        self.tried = [0.0] * positions
        self.accepted = [0.0] * positions
        self.sure_tried = [0.0] * (len(SURE_EDGES) + 1)
        self.sure_accepted = [0.0] * (len(SURE_EDGES) + 1)
        self._window: deque[tuple[int, float, tuple[float, ...]]] = deque(maxlen=CHANGE_WINDOW)
        self.changes = 0  # turns of the text detected so far
        self.depth = 0  # the most positions a step has tested (a bonus counts): `reach`
        self._n_tried = self._n_accepted = 0.0  # sums of tried and accepted, kept as they change
        self._alpha: list[float] | None = None  # alpha() until the counts change
        self._alpha_pooled = 0.0  # the pooled rate _alpha was shrunk towards

    def pooled(self) -> float:
        """Acceptance over all positions (the prior before any draft token was verified); with
        a `base`, shrunk towards its pooled rate, which it is until this record has evidence."""
        if self.base is not None:
            return (self._n_accepted + SHRINK * self.base.pooled()) / (self._n_tried + SHRINK)
        return self._n_accepted / self._n_tried if self._n_tried > 0 else self.prior

    def _expected(self) -> float:
        """The rate the change test holds recent steps to: the pooled one, kept within the
        bounds that half a token accepted and half rejected (Jeffreys' prior) would give, so
        that drafts all accepted do not make the first rejection impossible (a rate of 0 or 1
        is never proven; away from the ends the estimate is used as it is)."""
        n = self._n_tried
        if n <= 0:
            return self.pooled()  # the prior, or a base's rate
        return min(max(self._n_accepted / n, 0.5 / (n + 1.0)), (n + 0.5) / (n + 1.0))

    def _shrunk(self, accepted: list[float], tried: list[float]) -> list[float]:
        pooled = self.pooled()
        return [(a + SHRINK * pooled) / (t + SHRINK) for a, t in zip(accepted, tried)]

    def alpha(self) -> list[float]:
        pooled = self.pooled()  # moved by this record's counts, or by a base's evidence
        if self._alpha is None or pooled != self._alpha_pooled:
            self._alpha, self._alpha_pooled = self._shrunk(self.accepted, self.tried), pooled
        return self._alpha

    def reach(self) -> int:
        """The largest K this record's evidence supports: half as far again as the deepest
        position tested, as the step costs' `reach` (with a `base`, the deeper of the two). Positions
        never drafted take the pooled rate, and a few drafts all accepted put it near 1: at a
        new temperature two steps of 4 of 4 sent K to 25, whose 25 drafts kept 5."""
        depth = max(self.depth, self.base.depth) if self.base is not None else self.depth
        return half_again(depth)

    def by_sure(self) -> list[float]:
        """Acceptance of a drafted token per bucket of the draft's confidence in it."""
        return self._shrunk(self.sure_accepted, self.sure_tried)

    def observe(self, k: int, n_accepted: int, sure: tuple[float, ...]) -> None:
        """A model-draft step: k tokens drafted, n_accepted of them kept."""
        n_tried = min(n_accepted + 1, k)  # positions after a rejection were not tested
        self._step((n_tried, n_accepted, sure[:n_tried]))

    def observe_bonus(self, score: float) -> None:
        """The last step's drafts were all accepted and its bonus token scored (the chance one
        more draft token would have been accepted): one more position tried in that step."""
        if not self._window:
            return
        t, a, sure = self._window[-1]
        if t != a:
            return  # not a step whose drafts were all accepted
        self.depth = max(self.depth, t + 1)
        if t < len(self.tried):
            self._alpha = None
            self.tried[t] += 1.0
            self.accepted[t] += score
            self._n_tried += 1.0
            self._n_accepted += score
        self._window[-1] = (t + 1, a + score, sure)

    def observe_scores(self, scores: Sequence[float]) -> None:
        """Tokens committed while the model did not draft, each scored with the probability
        a draft of it would have been accepted (Decoder._catch_up): the evidence a plain
        stretch gives, each token a one-token step at the first position, and the run of
        scores after it a draft from there would have had at the later ones (`_add_run`)."""
        # a batch is tested as a whole against the estimate from before it (no step of it has
        # pulled that estimate its way yet): its run of recent tokens that fits worst
        p = self._expected()
        n, x, worst, since = 0, 0.0, 1.0, 0
        for j, s in enumerate(reversed(scores)):
            n, x = n + 1, x + s
            tail = binomial_tail(n, x, p)
            if tail < worst:
                worst, since = tail, j + 1
        # a long batch is tested as many windows at once: the level is shared among them
        if worst < CHANGE_LEVEL * min(1.0, CHANGE_WINDOW / max(len(scores), 1)):
            self._scale(1.0 / max(self._n_tried, 1.0))
            self._window.clear()
            self.changes += 1
            scores = scores[len(scores) - since :]
        for j, s in enumerate(scores):
            self._scale(DECAY)
            self._add((1, s, ()))
            self._add_run(scores, j)
            self._window.append((1, s, ()))

    def _add_run(self, scores: Sequence[float], j: int) -> None:
        """The positions after the first of the draft a step would have made from token j of a
        scored batch: position i tried with the chance the ones before it were all accepted,
        accepted with that chance times its score (at T = 0: the run of the draft's argmax up
        to its first miss). A plain stretch so tells the far positions too, as drafting steps
        do. They stay out of the pooled counts: the runs from neighbouring tokens overlap, so
        they are one token's evidence many times over, and the change test would trust them."""
        self._alpha = None
        run, i = scores[j], 1
        # a position counts as tested while a draft would more likely than not have reached it (at
        # T = 0: up to the first miss); fractional scores at T > 0 must not set `depth` for all of K
        while i < len(self.tried) and j + i < len(scores) and run >= 0.5:
            got = run * scores[j + i]
            self.tried[i] += run
            self.accepted[i] += got
            run, i = got, i + 1
        self.depth = max(self.depth, i)

    def _step(self, step: tuple[int, float, tuple[float, ...]]) -> None:
        p = self._expected()
        self._scale(DECAY)
        self._add(step)
        self._window.append(step)
        # the recent steps that fit the current estimate worst (the last one, two, ...)
        n, x = 0, 0.0
        worst, since = 1.0, 0
        for j, (t, a, _) in enumerate(reversed(self._window)):
            n, x = n + t, x + a
            tail = binomial_tail(n, x, p)
            if tail < worst:
                worst, since = tail, j + 1
        if worst < CHANGE_LEVEL:
            # the text turned: what came before weighs as one drafted token (a guess to
            # start from, not evidence), and the steps since the turn count in full
            suffix = list(self._window)[-since:]
            self._scale(1.0 / max(self._n_tried, 1.0))
            for st in suffix:
                self._add(st)
            self._window = deque(suffix, maxlen=CHANGE_WINDOW)
            self.changes += 1

    def _add(self, step: tuple[int, float, tuple[float, ...]]) -> None:
        n_tried, n_accepted, sure = step
        self._alpha = None
        self.depth = max(self.depth, n_tried)
        for i, s in enumerate(sure):
            b = bisect.bisect_right(SURE_EDGES, s)
            self.sure_tried[b] += 1.0
            self.sure_accepted[b] += i < n_accepted
        for i in range(min(n_tried, len(self.tried))):
            self.tried[i] += 1.0
            got = min(1.0, max(0.0, n_accepted - i))  # 1 before the count, a fractional score at it
            self.accepted[i] += got
            self._n_tried += 1.0
            self._n_accepted += got

    def _scale(self, d: float) -> None:
        self._alpha = None
        self._n_tried *= d
        self._n_accepted *= d
        for xs in (self.tried, self.accepted, self.sure_tried, self.sure_accepted):
            for i in range(len(xs)):
                xs[i] *= d


class ByContext:
    """The model's acceptance kept apart where prompt lookup finds a copy that has held for
    COPY_MATCH tokens or more, and elsewhere. Beside lookup the model drafts mostly where a
    copy broke off, its hardest tokens; judged by that record where a copy holds, a draft
    that copies as well as lookup does looked slower than it is. With a draft token 0.11 of a
    plain step (a GPU's cheap draft), on virtual costs at T = 0 the hybrid made 77 tok/s on
    revise against model-only's 115 (98.7 kept apart), on extract 106 against 115 (130).
    The copy record leans on the other's pooled rate until it has evidence of its own
    (docs/bench-history.md, stop 45). `use(match)` picks the record for the next step (`now`):
    its plan is made on it, and its outcome is evidence for it."""

    def __init__(self, positions: int, prior: float = 0.6) -> None:
        self.free = Acceptance(positions, prior)
        self.copy = Acceptance(positions, prior, base=self.free)
        self.now = self.free

    def use(self, match: int) -> None:
        """Select the record for a step whose lookup proposal matched `match` tokens (0: none)."""
        self.now = self.copy if match >= COPY_MATCH else self.free
