"""What one model's KV cache holds, kept in step with llama.cpp's (the decoder's two caches)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from .model import Model
from .sampling import Rows

PREFILL_CHUNK = 512


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Cache:
    """What one model's KV cache holds, kept in step with llama.cpp's. `foreign`: a draft with
    fewer ids than the target (a family's padding, a fine-tune's added tokens) reads the ids it
    lacks as 0 (llama.cpp refuses an id past its vocabulary; only the draft's guesses after it
    change, never the output), and `tokens` keeps them as committed."""

    def __init__(self, model: Model, foreign: bool = False) -> None:
        self.model = model
        self.tokens: list[int] = []
        self._lacks = model.n_vocab if foreign else None  # the first id the model lacks

    def _fed(self, tokens: Sequence[int]) -> Sequence[int]:
        n = self._lacks
        return tokens if n is None else [t if t < n else 0 for t in tokens]

    def set_head(self, k: int, n_shared: int) -> bool:
        """Ask for rows as heads holding k ids below `n_shared` (0: whole rows); whether they
        come so. Ids past the shared vocabulary may take places in a head: a longer one is asked."""
        set_head = getattr(self.model, "set_head", None)
        return set_head is not None and set_head(k + self.model.n_vocab - n_shared if k else 0) and k > 0

    def cut(self, n: int) -> None:
        # Always ask llama.cpp: after a failed decode it may hold more than we know of.
        self.model.trim(n)
        del self.tokens[n:]

    def sync(self, tokens: Sequence[int], cancel: threading.Event | None = None) -> int:
        """Make the cache hold exactly `tokens`; return how many had to be evaluated.

        A long prefill goes in chunks with the cancel flag checked between them, so a
        cancel (a client gone) does not wait for thousands of prompt tokens; a cancelled
        sync leaves the cache holding a prefix of `tokens`."""
        n = common_prefix(self.tokens, tokens)
        if n < len(self.tokens):
            self.cut(n)
        start = n
        while n < len(tokens):
            if cancel is not None and cancel.is_set():
                break
            chunk = list(tokens[n : n + PREFILL_CHUNK])
            self.model.eval(self._fed(chunk), n)
            self.tokens.extend(chunk)
            n += len(chunk)
        return n - start

    def extend(self, tokens: Sequence[int], logits_from: int) -> Rows:
        rows = self.model.eval(self._fed(tokens), len(self.tokens), logits_from)
        self.tokens.extend(tokens)
        return rows
