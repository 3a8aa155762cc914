"""Recent timings and a value robust to noise; shared by every cost table."""

from __future__ import annotations

from collections import deque

CONFIRM = 3  # samples before their median is trusted over their minimum (a first call builds a graph)


class Recent:
    """Recent timings of one kind of step, and a value robust to noise: their median once
    there are CONFIRM samples, the fastest before that (llama.cpp's first call of a batch
    shape builds a graph). A hiccup of a shared machine (one step ten times slower) moves a
    median no more than a low quantile would, and a step whose time truly varies is charged
    what it usually costs, not its luckiest quarter: a draft step, as the two models' weights
    evict each other from the caches, spreads wider than a plain one, so a lower quartile
    made drafting look cheaper than it was. Near break-even that is a loss: on the Q2_K
    pair at T = 1.0 it kept the controller drafting K = 1, slower than plain decoding
    (adaptive / plain 0.944x and 0.915x in two runs with the lower quartile, 0.985x and
    0.965x with the median)."""

    __slots__ = ("samples", "n", "_value")

    def __init__(self, size: int = 9) -> None:
        self.samples: deque[float] = deque(maxlen=size)
        self.n = 0
        self._value: float | None = None

    def add(self, x: float) -> None:
        self.samples.append(x)
        self.n += 1
        self._value = None

    @property
    def value(self) -> float:
        if self._value is None:
            xs = sorted(self.samples)
            self._value = xs[len(xs) // 2] if len(xs) >= CONFIRM else min(xs, default=0.0)
        return self._value
