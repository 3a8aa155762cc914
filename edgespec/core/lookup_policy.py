"""When to draft from prompt lookup, and how far: the cost model for a free draft source.

A lookup proposal costs no draft model time: a step that verifies k looked-up
tokens costs v(k+1) (one target pass over k+1 tokens) plus the step's fixed
Python work o. It pays when its expected tokens per second,

    speed(k) = E(k) / (v(k+1) + o),    E(k) = 1 + sum_{j<=k} prod_{i<=j} alpha_i,

beats the alternative (the model draft's best speed, or plain decoding's
1 / (v(1) + o)). Both costs are measured on this machine: `VerifyTimes` keeps
the median target time per batch size from every step (plain, model and lookup
steps all verify a batch), with a line through the measured sizes for the ones
not yet seen. Acceptance alpha_i is kept per position and per length of the
match (ROWS: the matched n-gram, and how far back the copy has held; a longer match is a
likelier copy), as decayed counts that
follow the text within a few steps (DECAY, on the match length just scored). A
proposal is scored on every step: verified on lookup steps, compared with what
the step committed on the others (`record`: the same acceptance in law), so the
record follows the text whichever source drafts. With no proposal to score, the
counts drift back towards the prior (IDLE_DECAY). It also times the steps no model drafted
(`draftless_speed`): beside a draft model, what the model's return after a copy must beat,
while lookup has taken a step lately (QUIET).
Pure: no model, no clock, no I/O.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque

from . import defaults
from .recent import Recent

L_MAX = 16  # the longest lookup draft: a copy run rarely holds longer, and v(n) grows with n
PRIOR = 0.5  # acceptance assumed before anything was seen: enough to try a proposal once
SHRINK = 4.0  # pseudo-counts pulling each position's rate towards the pooled one
DECAY = 0.9  # per scored step: about ten steps of memory, so a turn from copying to prose shows fast
IDLE_DECAY = 0.99  # per step with nothing scored (and for the other match lengths): old evidence fades
GROWTH = 0.1  # v(n) / v(1) - 1 per extra token, assumed until two batch sizes were measured
# target timings after which a batch size's own go stale (VerifyTimes): a machine's load moves over
# seconds, and 64 steps of 15-60 ms are 1-4 s; checking a stale size again costs at most a step
STALE = 64
# the match lengths a record is kept for (each row: from its length to the next's); 1-3 are
# n-grams shorter than the index's longest, 4 and up how far back the copy has held (MATCH_MAX)
ROWS = (1, 2, 3, 4, 8, 16)
BORROW = 8  # rows from this length on start from the shorter row's rate, not PRIOR
# steps without a lookup step after which lookup has gone quiet: a copy broken by a changed word
# resumes within a step or two, so after three the copy (or the answer that copied) is over
QUIET = 3


class VerifyTimes:
    """Median seconds of a target pass over n tokens, n = 1..n_max, measured: every batch a
    step verifies, up to a model draft of K_MAX that lookup finished with L_MAX more.

    With `stale` (the target's table): a size not timed in the last `stale` timings is no
    longer trusted above what the sizes timed since say (the line through them, or the
    GROWTH prior from one), and its old timings go when it is timed again. A draftless engine
    times plain steps every step but a lookup size only when lookup is taken, and lookup is
    taken only when its sizes look cheap: timings from a slow minute (a compile, another
    process) had kept lookup off for good, every copy afterwards decoded plainly (extract at
    T = 0 61 tok/s against 140; docs/bench-history.md, stop 46)."""

    def __init__(self, n_max: int = defaults.K_MAX + L_MAX + 1, stale: int | None = None) -> None:
        self.n_max, self.stale = n_max, stale
        self._by_n = [Recent() for _ in range(n_max + 1)]
        self._clock = 0  # timings added
        self._at = [0] * (n_max + 1)  # per n, the clock at its last timing
        self._expiry = 0  # the clock at which the next size goes stale (estimates are recomputed then)
        self._table: dict[int, float] = {}  # cost(n) asked since the last add
        self._pts: list[tuple[int, float]] | None = None  # measured() since the last add
        self._floor: list[float] | None = None  # per n, the largest measured time of a smaller batch
        # line() since the last add, boxed in a 1-tuple (its None means "under two sizes")
        self._fit: tuple[tuple[float, float] | None] | None = None

    def add(self, n: int, seconds: float) -> None:
        if 1 <= n <= self.n_max:
            self._clock += 1
            r = self._by_n[n]
            if self._stale(n):
                r.samples.clear()  # timed again after a long while: the old timings are another minute's
            self._at[n] = self._clock
            old = r.value if r.samples else None
            r.add(seconds)
            if self._expired() or r.value != old:  # a median that did not move changes no estimate
                self._table.clear()
                self._pts = self._fit = self._floor = None

    def _stale(self, n: int) -> bool:
        return self.stale is not None and self._clock - self._at[n] > self.stale

    def _expired(self) -> bool:
        """Whether a size went stale by this timing (the estimates are then computed again)."""
        if self.stale is None or self._clock < self._expiry:
            return False
        live = [self._at[m] + self.stale + 1 for m, r in enumerate(self._by_n) if r.samples and not self._stale(m)]
        self._expiry = min(live, default=self._clock + self.stale + 1)
        return True

    def measured(self) -> list[tuple[int, float]]:
        """(n, median) of the sizes timed (with `stale`, of those timed lately)."""
        if self._pts is None:
            self._pts = [(n, r.value) for n, r in enumerate(self._by_n) if r.samples and not self._stale(n)]
        return self._pts

    def cost(self, n: int) -> float:
        """v(n), computed once per measurement for each n asked (the decoder asks each step)."""
        n = min(max(n, 0), self.n_max)
        t = self._table.get(n)
        if t is None:
            t = self._table[n] = self._estimate(n)
        return t

    def line(self) -> tuple[float, float] | None:
        """(intercept, slope) of the least-squares line through the sizes measured (slope at
        least 0); None under two sizes. Computed once per measurement (asked several times a step)."""
        if self._fit is None:
            self._fit = (_line(self.measured()),)
        return self._fit[0]

    def _estimate(self, n: int) -> float:
        """The median where measured, else the least-squares line through the measured sizes
        (never below the largest measured time of a smaller batch: v grows with n). Only the
        sizes timed lately count (`stale`); a stale size's median is used where it is lower."""
        pts = self.measured()
        if not pts:
            return 0.0
        r = self._by_n[n]
        if r.samples and not self._stale(n):
            return r.value
        fit = self.line()
        if fit is None:
            ((n0, t0),) = pts
            fixed = t0 / (1 + GROWTH * (n0 - 1))
            line = fixed * (1 + GROWTH * (n - 1))
        else:
            intercept, slope = fit
            line = intercept + slope * n
        if self._floor is None:
            self._floor, top, fresh = [], 0.0, dict(pts)
            for m in range(self.n_max + 1):
                self._floor.append(top)
                top = max(top, fresh.get(m, 0.0))
        if r.samples:  # a stale timing is believed where it is lower, never below a smaller batch's
            line = min(line, r.value)
        return max(line, self._floor[n])


def _line(pts: list[tuple[int, float]]) -> tuple[float, float] | None:
    if len(pts) < 2:
        return None
    mn = sum(p[0] for p in pts) / len(pts)
    mt = sum(p[1] for p in pts) / len(pts)
    var = sum((p[0] - mn) ** 2 for p in pts)
    slope = max(0.0, sum((p[0] - mn) * (p[1] - mt) for p in pts) / var)
    return mt - slope * mn, slope


class LookupPolicy:
    """Acceptance of looked-up tokens, and the best length for a proposal."""

    def __init__(self, times: VerifyTimes) -> None:
        # a record per match length (ROWS), 1 being a copy resumed after an edit (LookupIndex._resumed)
        self.times = times
        # decayed counts per row and position, kept as stored * _weight[row]: a fade scales a
        # row's weight, not each of its counts (it runs every step)
        self._tried = [[0.0] * L_MAX for _ in ROWS]
        self._accepted = [[0.0] * L_MAX for _ in ROWS]
        self._weight = [1.0] * len(ROWS)
        self._overhead: deque[float] = deque(maxlen=9)  # step time outside the target pass
        self._draftless = (0.0, 0.0)  # decayed tokens and seconds of the steps no model drafted
        self._quiet = 0  # steps since the last lookup step

    @staticmethod
    def _row(match: int) -> int:
        return max(0, bisect.bisect_right(ROWS, match) - 1)

    def _pooled(self, row: int) -> float:
        """A row's rate over its positions, leaning on its prior as evidence fades: PRIOR, or
        for matches of BORROW and longer the next shorter row's rate (a copy that held longer
        is no less likely to hold on: a long match with no record yet is judged as the long
        matches before it were)."""
        prior = self._pooled(row - 1) if ROWS[row] >= BORROW else PRIOR
        w = self._weight[row]
        return (w * sum(self._accepted[row]) + SHRINK * prior) / (w * sum(self._tried[row]) + SHRINK)

    def alpha(self, match: int) -> list[float]:
        row = self._row(match)
        tried, accepted, w = self._tried[row], self._accepted[row], self._weight[row]
        pooled = self._pooled(row)  # and each position leans on the pooled rate
        return [(w * a + SHRINK * pooled) / (w * t + SHRINK) for a, t in zip(accepted, tried)]

    def evidence(self, match: int) -> float:
        """Positions tried, decayed, in the record for a `match`-token match."""
        row = self._row(match)
        return self._weight[row] * sum(self._tried[row])

    def overhead(self) -> float:
        return statistics.median(self._overhead) if self._overhead else 0.0

    def plain_speed(self, fixed: float = 0.0, per_token: float = 0.0) -> float:
        """Plain decoding's tokens per second, with what the step adds to a later catch-up of
        the draft model (`fixed` per step, `per_token` per token committed; see `best`)."""
        t = self.times.cost(1) + self.overhead() + fixed + per_token
        return 1.0 / t if t > 0 else 0.0

    def draftless_speed(self, per_token: float = 0.0) -> float:
        """Tokens per second of the recent steps no model drafted (lookup and plain steps, DECAY
        a step: the same memory as the record), each token charged `per_token` (what it adds to
        the draft model's next catch-up); 0.0 before any. What a model's return must beat.

        Also 0.0 once lookup has gone quiet (QUIET steps with no lookup step): those steps' speed
        says what staying out gave, not what it will give. Decayed alone, a fast copy kept a
        lagging model out of the plain stretch after it (revise at T = 0.8 after extract: 13
        plain steps where the model drafts 15 tokens a step)."""
        n, t = self._draftless
        return n / (t + per_token * n) if n > 0 and self._quiet < QUIET else 0.0

    def best(self, match: int, available: int, fixed: float = 0.0, per_token: float = 0.0) -> tuple[int, float]:
        """(k, expected tokens per second) of the best lookup draft of at most `available`
        tokens after a match of `match` tokens; (0, 0.0) before any cost was measured. Beside
        a draft model every token committed must later be fed to it: the step is charged
        `per_token` for each, and `fixed` for the catch-up it makes necessary (AdaptiveK)."""
        if available <= 0 or self.times.cost(1) <= 0.0:
            return 0, 0.0
        alpha, o = self.alpha(match), self.overhead()
        best_k, best_speed, e, run = 0, 0.0, 1.0, 1.0
        for k in range(1, min(available, L_MAX) + 1):
            run *= alpha[k - 1]
            e += run
            t = self.times.cost(k + 1) + o + fixed + per_token * e
            if t > 0 and e / t > best_speed:
                best_k, best_speed = k, e / t
        return best_k, best_speed

    def observe(self, match: int, k: int, n_accepted: int, verify_s: float, step_s: float) -> None:
        """A lookup step: k tokens proposed after a `match`-token match, n_accepted kept."""
        self.record(match, k, n_accepted)
        self._quiet = 0
        self._overhead.append(max(0.0, step_s - verify_s))
        self._ran(n_accepted + 1, step_s)

    def record(self, match: int, k: int, n_accepted: int, fade: bool = True) -> None:
        """Evidence on a proposal after a `match`-token match: of its first k tokens, the first
        n_accepted were (or would have been) accepted. Its match length's record moves fast
        (DECAY), the others' slowly (IDLE_DECAY); `fade=False` for a second proposal scored in
        the same step (a step fades the evidence once).

        Also fed by steps that did not verify the proposal (shadow scoring): the decoder
        compares the proposal with the tokens the step committed. That is the acceptance
        lookup would have had, in law: a committed token is distributed as the target's p
        (the decoding is lossless), so it equals the proposed x with probability p(x), the
        probability that x would have been accepted. So lookup's record stays current while
        the model drafts or plain steps run, at no cost, and lookup is taken when it pays."""
        row = self._row(match)
        if fade:
            self._fade(IDLE_DECAY, skip=row)
            self._fade(DECAY, only=row)
        one = 1.0 / self._weight[row]
        for i in range(min(n_accepted + 1, k, L_MAX)):  # positions after a rejection were not tested
            self._tried[row][i] += one
            self._accepted[row][i] += one if i < n_accepted else 0.0

    def shadowed(self, match: int, first: tuple[int, int], chained: tuple[tuple[int, int, int], ...]) -> None:
        """A step that verified no proposal (edgespec/core/shadow.py): its own proposal after a
        `match`-token match scored (`first`: tokens scored, leading ones committed; (0, 0) for
        none), then those lookup would have chained after it, each (match, scored, committed).
        Each fades the evidence as the lookup step it stands for would have: a model step that
        lookup would have taken in four steps counts as four."""
        if first[0]:
            self.record(match, *first)
        for m, scored, held in chained:
            self.record(m, scored, held)

    def idle(self, step_s: float = 0.0, verify_s: float = 0.0, plain: bool = False, fade: bool = True) -> None:
        """Any other step: with nothing scored (`fade`) lookup's evidence fades a little; a plain
        step measures the overhead and counts in `draftless_speed`."""
        self._quiet += 1
        if fade:
            self._fade(IDLE_DECAY)
        if plain:
            self._overhead.append(max(0.0, step_s - verify_s))
            self._ran(1, step_s)

    def _ran(self, tokens: int, seconds: float) -> None:
        n, t = self._draftless
        self._draftless = (DECAY * n + tokens, DECAY * t + seconds)

    def _fade(self, d: float, *, only: int | None = None, skip: int | None = None) -> None:
        for j in range(len(ROWS)) if only is None else (only,):
            if j != skip:
                self._weight[j] *= d
                if self._weight[j] < 1e-100:  # fold the weight into the counts before it underflows
                    w, self._weight[j] = self._weight[j], 1.0
                    self._tried[j] = [w * x for x in self._tried[j]]
                    self._accepted[j] = [w * x for x in self._accepted[j]]
