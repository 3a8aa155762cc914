"""Whole-step times per K measured on this machine, and the cost line fitted to them.

One `StepTimes` per engine, shared by its controllers (costs are the machine's;
acceptance is the temperature's). Also holds the target's `VerifyTimes` (time
per verified batch size), which prompt lookup's cost model reads.
"""

from __future__ import annotations

from . import defaults
from .lookup_policy import VerifyTimes
from .recent import Recent

STALE_STEPS = 64
OUTLIER = 0.25  # a step-time median this far off the fitted line is left out of the refit
SWITCH_MAX = 1.3  # a speculative step's fixed part, at most, in plain steps (measured: about 1.15)


class StepTimes:
    """Whole-step times per K (draft + verify + Python) measured on this machine, with the
    fitted cost line. One per engine, shared by its controllers: what a step costs does not
    depend on the temperature, only acceptance does, so a new temperature starts knowing it."""

    def __init__(self, k_max: int = defaults.K_MAX) -> None:
        self.k_max = k_max
        self.verify = VerifyTimes()  # target passes by batch size, from every kind of step
        self.by_k = [Recent() for _ in range(k_max + 1)]
        self.seen_at = [0] * (k_max + 1)  # the observation at which each K was last measured
        self.clock = 0

    def add(self, k: int, seconds: float) -> None:
        self.clock += 1
        if k <= self.k_max:
            self.by_k[k].add(seconds)
            self.seen_at[k] = self.clock

    def measured(self) -> bool:
        return bool(self.by_k[0].n) and any(r.n for r in self.by_k[1:])

    @property
    def plain(self) -> float:
        return self.by_k[0].value

    def fit(self) -> tuple[float, float]:
        """(fixed, per draft token) seconds of a speculative step, fitted to the measured
        medians by weighted least squares, then once more without the medians that lie
        more than OUTLIER off the line (a K measured once, in a slow moment, would
        otherwise bend it for as long as that K is not tried again)."""
        pts = [(k, r.value, min(len(r.samples), 5)) for k, r in enumerate(self.by_k) if k >= 1 and r.n]
        if not pts:
            return self.plain, 0.0  # nothing drafted yet: no line to fit
        fresh = [p for p in pts if self.clock - self.seen_at[p[0]] <= STALE_STEPS]
        if len(fresh) >= 2:
            pts = fresh  # costs measured long ago may belong to another text or load
        fixed, slope = _line(pts, self.plain)
        kept = [(k, t, n) for k, t, n in pts if abs(t - fixed - slope * k) <= OUTLIER * t]
        if len(kept) >= 2 and len(kept) < len(pts):
            fixed, slope = _line(kept, self.plain)
        return fixed, slope


def _line(pts: list[tuple[int, float, int]], plain: float) -> tuple[float, float]:
    """Weighted least squares of (K, seconds, weight) points. A speculative step holds one
    target pass plus the cost of switching between the two models, so the fixed part lies
    between one and SWITCH_MAX plain steps; a free fit outside that range (a few neighbouring
    K and one slow moment are enough for it) is pulled back to the bound and the slope
    refitted through it, which keeps the extrapolation to far K, and to K = 0, sane."""
    w = sum(n for _, _, n in pts)
    mk = sum(k * n for k, _, n in pts) / w
    mt = sum(t * n for _, t, n in pts) / w
    var = sum(n * (k - mk) ** 2 for k, _, n in pts)
    if var > 0:
        slope = max(0.0, sum(n * (k - mk) * (t - mt) for k, t, n in pts) / var)
        fixed = mt - slope * mk
        if plain <= fixed <= SWITCH_MAX * plain:
            return fixed, slope
    fixed = plain if var == 0 else min(max(mt - slope * mk, plain), SWITCH_MAX * plain)
    # through (0, fixed): least squares of t - fixed = slope * k
    slope = sum(n * k * (t - fixed) for k, t, n in pts) / sum(n * k * k for k, _, n in pts)
    return fixed, max(0.0, slope)
