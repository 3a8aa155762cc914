"""Choosing K, the number of draft tokens per step.

A controller has two methods: `next_k()` before a step and `observe(outcome)`
after it (the shape of transformers' CandidateGenerator). `FixedK` always
answers the same K; K = 0 is plain decoding through the same loop.

`AdaptiveK` maximises expected tokens per second from what it measures on
this machine (DESIGN.md, "The K controller"):

    E(K)     = 1 + sum_{j<=K} prod_{i<=j} alpha_i     (alpha_i: acceptance at position i,
                                                       given the earlier ones were accepted)
    speed(K) = E(K) / (K * c_d + v(K+1) + o)          speed(0) = 1 / (v(1) + o)

Measured on real machines the step time is close to linear in K, with a fixed
part larger than one plain step (switching between two models' weights costs
cache), so the controller fits T(K) = fixed + K * per_token to the medians of
recent whole-step times for each K it tried, and T(0) separately; alpha_i are
decayed counts, so the estimates follow the text as it changes. K = 0 wins when speculation does not pay; the controller
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


WARMUP = (0, 0, 2, 2, 5, 5, 0)
STALE_STEPS = 64


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
        # whole-step time for each K (draft + verify + Python): a step has a fixed part (one
        # target pass, switching between the two models) and a part that grows with K
        self.step_time = [_Recent() for _ in range(k_max + 1)]
        self._seen_at = [0] * (k_max + 1)  # the step at which each K was last measured
        self.steps = 0
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

    def step_cost(self) -> tuple[float, float]:
        """(fixed, per draft token) seconds of a speculative step, fitted to the measured
        medians by least squares; with one measured K the fixed part is a plain step's time."""
        pts = [(k, r.value, min(len(r.samples), 5)) for k, r in enumerate(self.step_time) if k >= 1 and r.n]
        fresh = [p for p in pts if self.steps - self._seen_at[p[0]] <= STALE_STEPS]
        pts = fresh or pts  # costs measured long ago may belong to another text or load
        plain = self.step_time[0].value
        if len(pts) == 1:
            k, t, _ = pts[0]
            return plain, max(0.0, (t - plain) / k)
        w = sum(n for _, _, n in pts)
        mk = sum(k * n for k, _, n in pts) / w
        mt = sum(t * n for _, t, n in pts) / w
        var = sum(n * (k - mk) ** 2 for k, _, n in pts)
        slope = max(0.0, sum(n * (k - mk) * (t - mt) for k, t, n in pts) / var)
        return mt - slope * mk, slope

    def speed(self, k: int, alpha: list[float] | None = None) -> float:
        if k == 0:
            t = self.step_time[0].value
        else:
            fixed, per_token = self.step_cost()
            t = fixed + per_token * k
        return self.expected_tokens(k, alpha) / t if t > 0 else 0.0

    def best_k(self) -> int:
        if not self.step_time[0].n or not any(r.n for r in self.step_time[1:]):
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
            # measure plain steps and two draft sizes (each twice: a new batch shape's first
            # call is slow) before trusting the model; cheap even if the pair is bad
            k = WARMUP[self.steps - 1]
        elif best <= 0:
            # speculation does not pay now: probe a small K now and then to see if it recovers
            k = (1 + (self.steps // self.recover_every) % 2) if self.steps % self.recover_every == 0 else 0
        elif self.steps % self.probe_every == 0:
            k = min(self.k_max, best + 1) if self._probe_up else max(1, best - 1)
            self._probe_up = not self._probe_up
        else:
            k = best
        return k

    def observe(self, o: StepOutcome) -> None:
        if o.k > 0:
            self._tried = [t * self.decay for t in self._tried]
            self._accepted = [a * self.decay for a in self._accepted]
            for i in range(min(o.n_accepted + 1, o.k)):
                self._tried[i] += 1.0
                self._accepted[i] += i < o.n_accepted
        if o.k <= self.k_max:
            self.step_time[o.k].add(o.step_s)
            self._seen_at[o.k] = self.steps
