"""Choosing K, the number of draft tokens per step.

A controller has two methods: `next_k()` before a step and `observe(outcome)`
after it (the shape of transformers' CandidateGenerator). `FixedK` always
answers the same K; K = 0 is plain decoding through the same loop.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepOutcome:
    k: int  # draft tokens proposed this step (may be < the K asked for, drafting can stop early)
    n_accepted: int
    draft_s: float
    verify_s: float
    step_s: float


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
