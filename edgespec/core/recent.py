"""The median of recent timings, robust to one-off slow calls; shared by every cost table."""

from __future__ import annotations

import statistics
from collections import deque


class Recent:
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
