"""Seeded draws that make a speculative answer plain decoding's own answer.

With a seed, every token is drawn by the Gumbel-max trick from noise that depends only on
(seed, position in the sequence, token id): the token at position i is the argmax over
the row's support of log p(x) + g(seed, i, x), an exact sample of p, with no state
between draws. A draft token drawn at position i from its own row q with the same noise
is kept when the target's draw there is that token, and the target's draw is what is
emitted either way (verify). So the answer is the one plain decoding draws for the same
seed, token for token, whatever K, the draft source or the controller's choices, at any
temperature (up to the target's rounding between batch sizes), and each token is still
distributed as the target says.

The price is acceptance, for model drafts only: the chance the two argmaxes agree is a
little below sum min(p, q), the rejection rule's (a looked-up token, one-hot, is kept
with probability p(x) either way). On the demo pair at T = 0.8 0.972 against 0.977 a
token; with its Q2_K draft 0.68 against 0.71 (docs/scripts/coupling_acceptance.py). And
a draw costs about 14 us against a generator's 3 at 40 tokens. So only a request that
asks for a seed (and with it, an answer it can reproduce) is drawn this way; others keep
the rejection rule. Pure numpy: a counter-based hash (splitmix64's finaliser), no
generator state.
"""

from __future__ import annotations

import numpy as np

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # steps positions apart in the hash's input
_ODD = np.uint64(0xD1B54A32D192ED03)  # spreads token ids (an odd multiplier: one to one)


def _mix(x: int) -> int:
    """splitmix64's finaliser on one 64-bit integer."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _mix_all(x: np.ndarray) -> np.ndarray:
    """The same on an array of uint64 (products wrap modulo 2^64, as the hash wants)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class Keyed:
    """The draws of one seeded request: `pick(ids, probs, position)` is the index of the
    token drawn from the distribution (ids, probs) at that position of the sequence."""

    __slots__ = ("key",)

    def __init__(self, seed: int) -> None:
        self.key = _mix(int(seed) & _MASK)  # a numpy integer too

    def uniforms(self, ids: np.ndarray, position: int) -> np.ndarray:
        """One uniform in (0, 1) per token id, a function of (seed, position, id) alone."""
        at = np.uint64(_mix((self.key + position * _GOLDEN) & _MASK))
        bits = _mix_all((ids.astype(np.uint64) * _ODD) ^ at) >> np.uint64(11)
        return (bits.astype(np.float64) + 0.5) * (1.0 / (1 << 53))

    def pick(self, ids: np.ndarray, probs: np.ndarray, position: int) -> int:
        # argmax of log p + Gumbel noise, written as argmax p / E with E = -log u exponential
        return int(np.argmax(probs / -np.log(self.uniforms(ids, position))))


def draws(seed: int | None) -> np.random.Generator | Keyed:
    """A request's draws: keyed by position with a seed (its answer is plain decoding's for
    that seed, and reproducible whatever K), else a fresh generator (the rejection rule)."""
    return np.random.default_rng() if seed is None else Keyed(seed)
