"""Whole-step times per K measured on this machine, and the cost curve made of them.

No machine prior: the curve T(K) is whatever this machine measured, in any shape (a
CPU's line, a GPU's flat-then-rising verify, a fixed cost for switching between the
two models). `curve()` makes it usable everywhere in 0..k_max:

  * measured K: the median of the last few whole steps of that K, nudged (at most NUDGE)
    towards a curve that bends little (`_smooth`: each K's median comes from another
    moment of a shared machine, older ones weigh less), then made non-decreasing in K
    (more drafting never makes a step cheaper; a slow moment at one K is pooled with its
    neighbours rather than trusted). A K timed once counts only
    from its second step (a new batch shape's first call is slow: on the demo pair a
    K = 13 step took 304 ms where the line through its neighbours said about 255);
  * between measured K: a straight line between the neighbours;
  * past the largest measured K (the frontier): the step grows as the last measured
    stretch did, and at least by the draft's own cost, `draft_slope()` per token (a
    draft token is one single-token eval of the draft on any machine). A curve that
    was flat is taken as flat (optimistic: a knee past the frontier is not known yet),
    one that was rising keeps rising. The controller may try a K up to `reach()`, half
    as far again as the frontier: a flat curve (a GPU's verify up to its knee) is
    explored in a few steps, and a wrong guess costs one step, after which it is measured.
    Tried and dropped: the same reach with only the draft's cost past the frontier (it
    overshot on the demo pair's CPU line, up to K = 22: 0.84-0.93x the best fixed K),
    and reaching far only while the verify stayed flat (no better on the simulated
    machines than one K at a time). Also dropped, twice: a steadier slope past the
    frontier (the median slope, or a least-squares line, over the measured upper half):
    neutral on the simulated machines, 0.98x and 0.94-1.00x in paired runs on the demo pair.

Where a change of K costs a rebuild (llama.cpp's CUDA graphs: after a change of batch size
the first call runs without a graph, the second captures one; on an H200 with an 8B target a
K = 2 step took 14-15 ms in the two steps after a change and 7.2 ms after), steps taken more
than SETTLE steps after a change are kept apart from the others, `reshape()` is what the
others cost more, and a K seen only just after a change (a warm-up or a probe) is charged its
cost less that share (`value`). The controller then probes further apart (`probe_every`) and
stops no draft early (a shorter draft changes the verify's batch size). Where the extra is
below RESHAPE_MIN (the CPU here) nothing changes.

One `StepTimes` per engine, shared by its controllers (costs are the machine's,
acceptance is the temperature's). Also holds the target's `VerifyTimes` (time per
verified batch size), which prompt lookup's cost model reads.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from . import defaults
from .lookup_policy import STALE, VerifyTimes
from .recent import Recent

CATCH_UP_N_MAX = 256  # scored catch-ups timed per size up to this many tokens fed
# the bend a step's cost may take between two measured K, against a K's own median (of up to
# 5 steps): 1 halves a lone K's deviation from its neighbours' line, a knee keeps most of its bend
BEND = 1.0
NUDGE = 0.05  # the most the fit moves a K's median: about the spread of a median of 5 shared-machine steps
AGE_HALF = 100.0  # steps after which a K's median counts half in the fit: the machine's load moves
# steps after a change of K that may pay for the runtime's rebuild at the new batch sizes
# (llama.cpp's CUDA graphs: the first call runs without one, the second captures it)
SETTLE = 2
# an extra below this share of a settled step is a first call's noise, not a rebuild (the demo
# pair on this CPU: -0.02, each K's ratio 0.89-1.05). Low, since the whole step's extra is the
# rebuild diluted by the draft's share of the step (an H200's 8B target: about 0.8 on plain
# steps; a simulated draft a third of a step under a rebuild of 0.68: 1.26-1.33 by K)
RESHAPE_MIN = 0.15
# what an untimed K's least possible speed must beat the best K's by to be probed (`untimed`): the
# bound takes the verify as flat, a few % too fast for the next K on a CPU's line, where probing
# every K it beat cost 1-5% at T = 0.8 on the demo pair (fixed per-call costs); a tile's saving is more
UNTIMED_GAIN = 1.05


class StepTimes:
    """Whole-step and draft-part times per K (draft + verify + Python) on this machine."""

    def __init__(self, k_max: int = defaults.K_MAX) -> None:
        self.k_max = k_max
        self.verify = VerifyTimes(stale=STALE)  # target passes by batch size, from every kind of step
        self.by_k = [Recent() for _ in range(k_max + 1)]
        self.draft_by_k = [Recent() for _ in range(k_max + 1)]
        self.catch_up = Recent()  # checks of plain decoding: the draft fed what it missed, a call of its own
        self.fed = VerifyTimes(CATCH_UP_N_MAX)  # what a lag adds to a model step, by tokens fed (feed_cost)
        self.scored = VerifyTimes(CATCH_UP_N_MAX)  # scored catch-ups by tokens fed (the same per-size table)
        self.clock = 0
        self._drafts = 0  # draft steps timed (draft_slope changes only then)
        self._at = [0] * (k_max + 1)  # the clock when each K was last timed
        self._curve: tuple[tuple, list[float], int] = ((), [], 0)  # (key, curve, frontier): curve()
        self._curve_at = -1  # the clock when curve() last looked (only add() moves what it reads)
        self._body: tuple[tuple, list[tuple[int, float, float]]] = ((), [])  # (key, smoothed draft K): _points()
        self._slope: tuple[int, float] = (-1, 0.0)  # (draft steps timed, draft_slope())
        # per K, the steps timed at least SETTLE steps after a change of K, and the others
        self.settled = [Recent() for _ in range(k_max + 1)]
        self.fresh = [Recent() for _ in range(k_max + 1)]
        self.last_k, self._run = -1, 0  # the last step's K and how many steps in a row had it
        self._reshape = (-1, 0.0)  # (clock, reshape())

    def add(self, k: int, seconds: float, draft_s: float = 0.0) -> None:
        self.clock += 1
        self._run = self._run + 1 if k == self.last_k else 1
        self.last_k = k
        if k <= self.k_max:
            (self.settled if self._run > SETTLE else self.fresh)[k].add(seconds)
            self._at[k] = self.clock
            self.by_k[k].add(seconds)
            if k:
                self.draft_by_k[k].add(draft_s)
                self._drafts += 1

    def catch_up_fixed(self) -> float | None:
        """What a scored catch-up costs whatever it feeds: switching to the draft model, a
        call's own overhead. The intercept of a line through the sizes measured (at least
        the draft's cost of one token); None until two sizes were measured."""
        line = self.scored.line()
        return None if line is None else max(line[0], self.draft_slope())

    def feed_cost(self, n: int) -> float:
        """Seconds to feed the draft n tokens it missed (plain and lookup steps pile them up):
        what they add to the draft's first call of the next model step, which reads them in
        the same batch (Decoder: that call less a one-token call). A line through the sizes
        measured: its intercept is whatever a batch's size costs beyond its tokens (about
        nothing on the demo pair; a separate call cost about 6 ms more, a third of a draft
        token); 0 before any was measured, n times the average per token while one size was."""
        if n <= 0:
            return 0.0
        if self.fed.line() is None:  # one size: no fixed part told apart yet
            return n * self.feed_slope()
        top = self.fed.n_max  # past the sizes timed: on along the slope
        return self.fed.cost(min(n, top)) + max(0, n - top) * self.feed_slope()

    def feed_fixed(self) -> float:
        """What a catch-up costs whatever it feeds (the line's intercept, at least 0)."""
        line = self.fed.line()
        return 0.0 if line is None else max(0.0, line[0])

    def feed_slope(self) -> float:
        """What one more token adds to a catch-up (a looked-up token accepted adds one)."""
        line, pts = self.fed.line(), self.fed.measured()
        if line is None:
            return pts[0][1] / pts[0][0] if pts else 0.0
        return line[1]

    def measured(self) -> bool:
        """A plain step and a draft step were both timed."""
        return self.by_k[0].n > 0 and self.clock > self.by_k[0].n

    @property
    def plain(self) -> float:
        return self.value(0)

    def reshape(self) -> float:
        """What a step costs more (a share) in the SETTLE steps after a change of K than later:
        the runtime rebuilding its work for the new batch sizes (llama.cpp's CUDA graphs). The
        median over the K timed both ways; 0 where that is below RESHAPE_MIN or not known."""
        if self._reshape[0] != self.clock:
            ratios = [f.value / s.value for f, s in zip(self.fresh, self.settled) if f.n and s.n and s.value > 0]
            extra = statistics.median(ratios) - 1.0 if ratios else 0.0
            self._reshape = (self.clock, extra if extra >= RESHAPE_MIN else 0.0)
        return self._reshape[1]

    def probe_every(self, every: int, budget: float) -> int:
        """Steps between probes of another K: `every`, or where a change of K costs a rebuild
        (`reshape`), enough that the three steps a probe disturbs (its own and the two after it,
        back at the best K) cost `budget` of the time."""
        return max(every, math.ceil(3 * self.reshape() / budget))

    def value(self, k: int) -> float:
        """A step's cost at K: its recent median, or where changes of K cost a rebuild
        (`reshape`), what the K costs once settled: its settled steps, else the others less
        the rebuild (a probe or a warm-up step is always a changed K's first)."""
        extra = self.reshape()
        if not extra:
            return self.by_k[k].value
        settled = self.settled[k]
        return settled.value if settled.n else self.by_k[k].value / (1.0 + extra)

    def draft_slope(self) -> float:
        """Seconds per extra draft token: the median of the slopes between every two measured
        K of the draft part (Theil-Sen: one K caught in a slow moment does not tilt it; with
        one K measured, its draft time per token, an upper bound). Computed once per draft step added."""
        if self._slope[0] != self._drafts:
            pts = [(k, r.value) for k, r in enumerate(self.draft_by_k) if k and r.n]
            if len(pts) < 2:
                slope = pts[0][1] / pts[0][0] if pts else 0.0
            else:
                slopes = [(tb - ta) / (kb - ka) for i, (ka, ta) in enumerate(pts) for kb, tb in pts[i + 1 :]]
                slope = max(0.0, statistics.median(slopes))
            self._slope = (self._drafts, slope)
        return self._slope[1]

    def frontier(self) -> int:
        """The largest K measured."""
        self.curve()
        return self._curve[2]

    def optimistic(self, k: int) -> float:
        """The least a step at a K timed fewer than twice can cost, where a K below it (not 0)
        was timed: that K's cost and the draft's own per extra token, the verify taken as flat
        (a line through measured K misses a batch size the target runs as cheaply as a smaller
        one: on the demo pair's CPU 6, 7 and 8 tokens took 47 ms, 9 took 52); 0 else."""
        if self.by_k[k].n >= 2:
            return 0.0
        below = max((j for j in range(1, k) if self.by_k[j].n >= 2), default=0)
        return self.curve()[below] + (k - below) * self.draft_slope() if below else 0.0

    def untimed(self, expected: Callable[[int], float], best: float, top: int = defaults.K_MAX) -> int:
        """The K up to `reach()` (and `top`) not yet timed that, at its least possible cost (`optimistic`)
        and `expected` tokens a step, would be the fastest, beating `best` tokens per second
        by UNTIMED_GAIN; 0 if none. The controller probes it: neighbours of the best K alone
        leave a cheap batch size two K away untimed (the line through K = 3 and 8 put K = 6 at
        168 ms, 147 timed), and past a dear one (a matmul's tile: 5 tokens cost as 8) the
        rise says every K further is dear."""
        pick, best = 0, best * UNTIMED_GAIN
        for k in range(2, min(self.reach(), top) + 1):
            t = self.optimistic(k)
            speed = expected(k) / t if t > 0 else 0.0
            if speed > best:
                best, pick = speed, k
        return pick

    def reach(self, frontier: int | None = None) -> int:
        """The largest K worth a try past the frontier: half as far again (at least one K), so
        a flat curve is explored in a few steps rather than one K at a time."""
        return min(self.k_max, half_again(self.frontier() if frontier is None else frontier))

    def best_saving(self) -> float:
        """Seconds a token saves at best over plain decoding: drafting with every draft accepted
        at the cheapest K per token of the curve (0 where no K beats a plain step)."""
        curve = self.curve()
        return max([0.0, *(curve[0] - t / (k + 1) for k, t in enumerate(curve) if k)])

    def check_cost(self, n: int) -> float:
        """A scored catch-up of n tokens: the size timed (a line through those measured), else
        n draft tokens' worth (an upper bound: a batch costs less per token)."""
        return self.scored.cost(n) if self.scored.measured() else n * self.draft_slope()

    def curve(self) -> list[float]:
        """Estimated seconds of a step at each K = 0..reach + 1 (see the module docstring);
        computed again when a draft step was timed or the plain step's median or weight moved."""
        if self._curve_at == self.clock:  # asked several times a step: nothing moved since
            return self._curve[1]
        self._curve_at = self.clock
        head = self.by_k[0]
        plain = self.value(0) if head.n else None
        key = (self._drafts, plain, len(head.samples), self.clock - self._at[0], self.reshape())
        if self._curve[0] != key:
            frontier = max((k for k, r in enumerate(self.by_k) if r.n), default=0)
            self._curve = (key, self._fit(min(self.k_max, self.reach(frontier) + 1)), frontier)
        return self._curve[1]

    def _fit(self, top: int) -> list[float]:
        """The curve up to K = top (past the frontier nothing is chosen, so nothing is needed)."""
        pts = self._points()
        if not pts:
            return [0.0] * (top + 1)
        ks, ts = _monotone(pts)
        slope = self.draft_slope()
        if len(ks) >= 2 and ks[-1] > 1:
            # past the frontier the step grows at least as the last measured stretch did (a
            # rising verify keeps rising; a flat one is as flat as the draft's own cost allows)
            slope = max(slope, (ts[-1] - ts[-2]) / (ks[-1] - ks[-2]))
        out: list[float] = []
        j = 0  # the first trusted point at or past k
        for k in range(top + 1):
            while j < len(ks) and ks[j] < k:
                j += 1
            if j == len(ks):
                t = ts[-1] + (k - ks[-1]) * slope
            elif j == 0 or ks[j] == k:
                t = ts[j]
            else:
                t = ts[j - 1] + (k - ks[j - 1]) / (ks[j] - ks[j - 1]) * (ts[j] - ts[j - 1])
            out.append(max(t, out[-1]) if out else t)
        return out

    def _points(self) -> list[tuple[int, float, float]]:
        """(K, seconds, weight) of the K trusted, the draft steps' medians smoothed (`_smooth`).
        A K timed once is not trusted yet where two are confirmed (a new batch shape's first
        call is slow). Each K's weight is its steps (up to 5), halved every AGE_HALF steps
        since it was last timed (down to a thousandth: an ancient median still counts where
        nothing newer is near); a draft K's age counts from the last draft step, so that plain
        steps leave the draft steps' fit as it was (it is kept until the next draft step)."""
        timed = [k for k, r in enumerate(self.by_k) if r.n]
        confirmed = [k for k in timed if len(self.by_k[k].samples) >= 2]
        if len(confirmed) >= 2:
            timed = confirmed
        head = self.by_k[0]
        pts = [(0, self.value(0), _weight(head, self.clock - self._at[0]))] if timed and timed[0] == 0 else []
        key = (self._drafts, len(confirmed) >= 2, self.reshape())
        if self._body[0] != key:
            body = [k for k in timed if k]
            last = max((self._at[k] for k in body), default=0)
            fit = _smooth([(k, self.value(k), _weight(self.by_k[k], last - self._at[k])) for k in body])
            self._body = (key, fit)
        return pts + self._body[1]


def half_again(n: int) -> int:
    """How far past n measured (K, or positions drafted) the controller may try: n // 2 more, at least one."""
    return n + max(1, n // 2)


def _weight(r: Recent, age: int) -> float:
    return min(len(r.samples), 5) * max(1e-3, 0.5 ** (age / AGE_HALF))


def _smooth(pts: list[tuple[int, float, float]]) -> list[tuple[int, float, float]]:
    """The draft steps' medians (K >= 1, sorted by K) pulled towards a curve that bends little,
    each by at most NUDGE of itself: the least squares of weight * (t - f)^2 + BEND * (each
    change of slope between measured neighbours)^2 (a Whittaker smoother over irregular K),
    clipped. On a shared machine each K's median comes from another moment, and a K a few
    percent cheap or dear beside its neighbours is where the controller would sit (on the
    demo pair: K = 6 measured 116 ms between 108 and 140, where the line through them says
    122 and 138: 0.89-0.92x the best fixed K on three prompts). The clip keeps a knee, or a
    stale median from a slow minute (the fit cannot tell them apart), from bending its
    neighbours further. Points on a straight line, and any two, come back as they were; K = 0
    is kept as measured (the switch to drafting costs what it costs: a step, not a bend)."""
    head = [p for p in pts if p[0] == 0]
    body = [p for p in pts if p[0] > 0]
    n = len(body)
    if n < 3:
        return pts
    # the normal equations (diag(w) + BEND D'D) f = w t, D's row i the slope after point i + 1
    # minus the slope before it: a pentadiagonal system, solved by its banded Cholesky factor
    # (a dozen points: plain Python is several times faster than building the dense matrix)
    inv = [1.0 / (body[i + 1][0] - body[i][0]) for i in range(n - 1)]
    d0 = [p[2] for p in body]  # the diagonal and the two bands above it
    d1, d2 = [0.0] * (n - 1), [0.0] * (n - 2)
    for i in range(n - 2):
        a, c = inv[i], inv[i + 1]
        b = -a - c
        d0[i] += BEND * a * a
        d0[i + 1] += BEND * b * b
        d0[i + 2] += BEND * c * c
        d1[i] += BEND * a * b
        d1[i + 1] += BEND * b * c
        d2[i] += BEND * a * c
    f = _solve_banded(d0, d1, d2, [p[2] * p[1] for p in body])
    out = [(k, min(max(x, (1 - NUDGE) * t), (1 + NUDGE) * t), wt) for (k, t, wt), x in zip(body, f)]
    return head + out


def _solve_banded(d0: list[float], d1: list[float], d2: list[float], rhs: list[float]) -> list[float]:
    """x with A x = rhs, A symmetric positive definite with diagonal d0 and the bands d1
    (A[j, j+1]) and d2 (A[j, j+2]): A = L L' with L's diagonal l0 and bands l1, l2 below."""
    n = len(d0)
    l0, l1, l2, y = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
    for j in range(n):
        if j >= 2:
            l2[j] = d2[j - 2] / l0[j - 2]
        if j >= 1:
            l1[j] = (d1[j - 1] - l2[j] * l1[j - 1]) / l0[j - 1]
        l0[j] = math.sqrt(d0[j] - l1[j] ** 2 - l2[j] ** 2)
        y[j] = (rhs[j] - l1[j] * (y[j - 1] if j >= 1 else 0.0) - l2[j] * (y[j - 2] if j >= 2 else 0.0)) / l0[j]
    x = [0.0] * n
    for j in range(n - 1, -1, -1):
        after = (l1[j + 1] * x[j + 1] if j + 1 < n else 0.0) + (l2[j + 2] * x[j + 2] if j + 2 < n else 0.0)
        x[j] = (y[j] - after) / l0[j]
    return x


def _monotone(pts: list[tuple[int, float, float]]) -> tuple[list[int], list[float]]:
    """Weighted isotonic regression (pool adjacent violators) of (K, seconds, weight),
    sorted by K: the closest non-decreasing sequence."""
    blocks: list[list[float]] = []  # [sum of weight * t, sum of weight, first index, last index]
    for i, (_, t, w) in enumerate(pts):
        blocks.append([w * t, w, i, i])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            last = blocks.pop()
            blocks[-1][0] += last[0]
            blocks[-1][1] += last[1]
            blocks[-1][3] = last[3]
    ts = [0.0] * len(pts)
    for total, weight, first, last_i in blocks:
        for m in range(int(first), int(last_i) + 1):
            ts[m] = total / weight
    return [k for k, _, _ in pts], ts
