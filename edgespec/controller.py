"""Choosing K, the number of draft tokens per step.

A controller has two methods: `next_k()` before a step and `observe(outcome)`
after it (the shape of transformers' CandidateGenerator). `FixedK` always
answers the same K; K = 0 is plain decoding through the same loop.

`AdaptiveK` maximises expected tokens per second from what it measures on
this machine (DESIGN.md, "The K controller"):

    E(K)     = 1 + sum_{j<=K} prod_{i<=j} alpha_i     (alpha_i: acceptance at position i,
                                                       given the earlier ones were accepted)
    speed(K) = E(K) / (K * c_d + v(K+1) + o)          speed(0) = 1 / (v(1) + o)

alpha_i, the draft cost per token c_d, the verify cost v(n) per batch size and
the fixed overhead o are medians of recent steps (alpha: decayed counts), so they follow the
text as it changes. K = 0 wins when speculation does not pay; the controller
then probes a small K now and then so it notices when acceptance recovers, and
otherwise probes the neighbours of its best K so their estimates stay fresh.
Pure: no model, no clock, no I/O.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class StepOutcome:
    k: int  # draft tokens proposed this step (may be < the K asked for: drafting can stop early)
    n_accepted: int
    draft_s: float
    verify_s: float
    step_s: float


WARMUP = (0, 0, 3, 3, 2, 0, 2)


class FixedK:
    def __init__(self, k: int) -> None:
        if k < 0:
            raise ValueError("k must be >= 0")
        self.k = k

    def next_k(self) -> int:
        return self.k

    def observe(self, outcome: StepOutcome) -> None:
        pass

    def estimated_speedup(self) -> float | None:
        return None


class _Recent:
    """The median of the last few timings: robust to the first call of a new batch shape
    (llama.cpp builds a graph for it) and to a moment of contention on a shared machine."""

    __slots__ = ("samples", "n")

    def __init__(self, size: int = 9) -> None:
        self.samples: deque[float] = deque(maxlen=size)
        self.n = 0

    def add(self, x: float) -> None:
        if self.n == 1:
            self.samples.clear()  # the very first call of a shape pays for building its graph
        self.samples.append(x)
        self.n += 1

    @property
    def value(self) -> float:
        return statistics.median(self.samples) if self.samples else 0.0


class AdaptiveK:
    def __init__(
        self,
        k_max: int = 10,
        *,
        probe_every: int = 8,
        recover_every: int = 32,
        decay: float = 0.97,
        prior_alpha: float = 0.6,
    ) -> None:
        self.k_max = k_max
        self.probe_every = probe_every
        self.recover_every = recover_every
        self.decay = decay
        self.prior_alpha = prior_alpha
        # decayed counts of draft tokens tried / accepted at each position
        self._tried = [0.0] * k_max
        self._accepted = [0.0] * k_max
        self.draft_cost = _Recent(15)  # seconds per draft token
        # verify cost per batch size n = 1..k_max+1; unmeasured sizes are interpolated
        self.verify_cost = [_Recent() for _ in range(k_max + 2)]
        self.overhead = _Recent(15)
        self.steps = 0
        self.best = 0
        self.last_k = 0
        self._probe_up = True

    # -- the model -------------------------------------------------------------------------
    def alpha(self) -> list[float]:
        """Acceptance per position, each shrunk towards the pooled rate (positions far out
        are tried less often; the pooled rate is the best guess for them)."""
        tried = sum(self._tried)
        pooled = sum(self._accepted) / tried if tried > 0 else self.prior_alpha
        m = 3.0
        return [(a + m * pooled) / (t + m) for a, t in zip(self._accepted, self._tried)]

    def expected_tokens(self, k: int, alpha: list[float] | None = None) -> float:
        alpha = alpha if alpha is not None else self.alpha()
        e, run = 1.0, 1.0
        for i in range(k):
            run *= alpha[i]
            e += run
        return e

    def verify_s(self, n: int) -> float:
        measured = [(m, c.value) for m, c in enumerate(self.verify_cost) if m >= 1 and c.n]
        if not measured:
            return 0.0
        below = [(m, c) for m, c in measured if m <= n]
        above = [(m, c) for m, c in measured if m >= n]
        if below and above:
            (m0, c0), (m1, c1) = below[-1], above[0]
            return c0 if m1 == m0 else c0 + (c1 - c0) * (n - m0) / (m1 - m0)
        if below:  # extrapolate with the slope seen so far (at least flat)
            (m0, c0) = below[-1]
            slope = (c0 - measured[0][1]) / (m0 - measured[0][0]) if m0 > measured[0][0] else 0.0
            return c0 + max(slope, 0.0) * (n - m0)
        return above[0][1]

    def speed(self, k: int, alpha: list[float] | None = None) -> float:
        t = k * self.draft_cost.value + self.verify_s(k + 1) + self.overhead.value
        return self.expected_tokens(k, alpha) / t if t > 0 else 0.0

    def best_k(self) -> int:
        if not self.verify_cost[1].n or not self.draft_cost.n:
            return -1  # not measured yet
        alpha = self.alpha()
        return max(range(self.k_max + 1), key=lambda k: self.speed(k, alpha))

    def estimated_speedup(self) -> float | None:
        best = self.best_k()
        plain = self.speed(0)
        return self.speed(best) / plain if best >= 0 and plain > 0 else None

    # -- the protocol ------------------------------------------------------------------------
    def next_k(self) -> int:
        self.steps += 1
        best = self.best_k()
        if self.steps <= len(WARMUP):
            # measure plain steps and a few small draft sizes (each at least twice: a new batch
            # shape's first call is slow) before trusting the model; cheap if the pair is bad
            k = WARMUP[self.steps - 1]
        elif best <= 0:
            # speculation does not pay now: probe a small K now and then to see if it recovers
            k = (1 + (self.steps // self.recover_every) % 2) if self.steps % self.recover_every == 0 else 0
        elif self.steps % self.probe_every == 0:
            k = min(self.k_max, best + 1) if self._probe_up else max(0, best - 1)
            self._probe_up = not self._probe_up
        else:
            k = best
        self.best, self.last_k = max(best, 0), k
        return k

    def observe(self, o: StepOutcome) -> None:
        if o.k > 0:
            self._tried = [t * self.decay for t in self._tried]
            self._accepted = [a * self.decay for a in self._accepted]
            for i in range(min(o.n_accepted + 1, o.k)):
                self._tried[i] += 1.0
                self._accepted[i] += i < o.n_accepted
        if o.k > 0:
            self.draft_cost.add(o.draft_s / o.k)
        if o.k + 1 < len(self.verify_cost):
            self.verify_cost[o.k + 1].add(o.verify_s)
        self.overhead.add(max(0.0, o.step_s - o.draft_s - o.verify_s))
