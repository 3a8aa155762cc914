"""Everything a row of the sampling transform depends on besides the logits: penalties and
logit bias (`History`) and a grammar (`Grammar`), following one token history.

The decoder pushes draft tokens as it drafts and truncates after verification;
both parts follow, so the row of position i, target or draft, is transformed
with the same history: the committed tokens plus the drafts before i. The
grammar covers generated tokens only (the prompt is not JSON), so it is
offset by the prompt's length.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .grammar import Grammar
from .penalties import History


class Constraints:
    def __init__(self, history: History | None, grammar: Grammar | None, n_prompt: int) -> None:
        self.history, self.grammar = history, grammar
        self.n_prompt = n_prompt
        self.n = history.n if history is not None else n_prompt

    def push(self, token: int) -> None:
        self.extend((token,))

    def extend(self, tokens: Sequence[int]) -> None:
        if self.history is not None:
            self.history.extend(tokens)
        if self.grammar is not None:
            self.grammar.extend(tokens)
        self.n += len(tokens)

    def truncate(self, n: int) -> None:
        if n >= self.n:
            return
        if self.history is not None:
            self.history.truncate(n)
        if self.grammar is not None:
            self.grammar.truncate(n - self.n_prompt)
        self.n = n

    def commit(self) -> None:
        """What was pushed so far is the answer's (the grammar's dead ends there are errors)."""
        if self.grammar is not None:
            self.grammar.commit()

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens` may follow (all, without a grammar)."""
        return len(tokens) if self.grammar is None else self.grammar.valid_prefix(tokens)

    def apply(self, row: np.ndarray) -> np.ndarray:
        if self.history is not None:
            row = self.history.apply(row)
        if self.grammar is not None:
            row = self.grammar.apply(row)
        return row
