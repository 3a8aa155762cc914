"""Recent timings and a value robust to noise; shared by every cost table."""

from __future__ import annotations

from collections import deque

CONFIRM = 3  # samples before their lower quartile is trusted over their minimum


class Recent:
    """Recent timings of one kind of step, and a value robust to noise. Noise on a shared
    machine only ever adds time (a hiccup can make one step ten times slower; llama.cpp's
    first call of a batch shape builds a graph), so the value is a low one: the lower
    quartile once there are CONFIRM samples, the fastest before that."""

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
            self._value = xs[len(xs) // 4] if len(xs) >= CONFIRM else min(xs, default=0.0)
        return self._value
