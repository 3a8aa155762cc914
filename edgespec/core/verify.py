"""The acceptance rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

p is the target, q the draft. For i = 1..K accept draft[i] with probability
min(1, p_i(x) / q_i(x)); at the first rejection emit one token drawn from
norm(max(0, p_i - q_i)) and stop; if all K are accepted emit a bonus token
drawn from p_{K+1}. The emitted tokens are distributed exactly as K+1 (or
fewer) tokens sampled from the target alone.

The residual is computed from both supports matched by token id, never from two
truncated lists matched by index. With one-hot rows (temperature 0) the rule
reduces to "accept while x == argmax p, then emit argmax p" and draws nothing
from the RNG.

A seeded request's draws (coupling.Keyed) are checked another way, with the same law:
every token emitted is the target's own draw at its position, a function of the seed and
the position alone, and a draft token (drawn by the draft model with the same noise, or
looked up) is kept when it is that draw. The answer is then plain decoding's for the
seed, whatever was drafted. A looked-up token (one-hot q) is kept with probability
p_i(x), as above; a model's draft token a little less often than above (coupling.py).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from .coupling import Keyed
from .sampling import Dist, Draws


class Rows(Protocol):
    """The target's rows, indexable (the decoder computes each only when it is looked at)."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> Dist: ...


def residual(p: Dist, q: Dist) -> Dist:
    """norm(max(0, p - q)): positive only where p is, so over p's support, with q read at
    those ids through a dense row (a sorted union of both supports cost 11 ms a rejection
    at 152k when top-p alone keeps some 10k tokens each; this is O(|p| + |q|))."""
    dense = _zeros(max(int(p.ids.max(initial=-1)), int(q.ids.max(initial=-1))) + 1)
    try:
        dense[q.ids] = q.probs
        diff = p.probs - dense[p.ids]
    finally:
        dense[q.ids] = 0.0  # all zeros again for the next rejection, whatever happened
    keep = diff > 0.0
    total = diff[keep].sum()
    if total <= 1e-12:
        # p == q up to rounding: the rejection had probability ~0; fall back to p.
        return p
    return Dist(p.ids[keep], diff[keep] / total)


_ZEROS = threading.local()


def _zeros(n: int) -> np.ndarray:
    """This thread's row of n zeros, kept zero by its users: a fresh one per rejection faults
    in a page per token it touches (38 against 15 us at 262k with 40 tokens each)."""
    row = getattr(_ZEROS, "row", None)
    if row is None or row.shape[0] < n:
        row = _ZEROS.row = np.zeros(n)
    return row[:n]


def verify(draft: Sequence[int], q: Sequence[Dist], p: Rows, rng: Draws, at: int = 0) -> tuple[int, int]:
    """Check K draft tokens against the target.

    `q[i]` is the draft distribution draft[i] was sampled from, `p[i]` the
    target's at the same position; `p` has K+1 rows (the last one for the
    bonus token); `at` is draft[0]'s position in the sequence. Returns (number
    of draft tokens accepted, the token the target emits after them).
    """
    assert len(q) == len(draft) and len(p) == len(draft) + 1
    if isinstance(rng, Keyed):
        return _keyed(draft, q, p, rng, at)
    for i, x in enumerate(draft):
        px = p[i].prob(x)
        qx = q[i].prob(x)
        assert qx > 0.0, "draft token was not sampled from its q row"
        if px >= qx or (px > 0.0 and rng.random() < px / qx):
            continue
        return i, residual(p[i], q[i]).sample(rng)
    return len(draft), p[len(draft)].sample(rng)


def _keyed(draft: Sequence[int], q: Sequence[Dist], p: Rows, keyed: Keyed, at: int) -> tuple[int, int]:
    """A seeded request's check: each token emitted is the target's own draw at its position."""
    for i, x in enumerate(draft):
        assert q[i].prob(x) > 0.0, "draft token was not sampled from its q row"
        t = p[i].sample(keyed, at + i)
        if t != x:
            return i, t
    return len(draft), p[len(draft)].sample(keyed, at + len(draft))
