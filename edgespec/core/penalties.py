"""Penalties and logit bias: the part of the sampling transform that depends on the history.

A row goes through `History.apply` and then `to_dist` (top-k, top-p, min-p,
temperature), llama.cpp's order: logit bias, then the penalties, then the rest.
- `logit_bias`: bias[t] is added to logit t (-100 bans a token in practice).
- `repeat` (llama.cpp's repeat_penalty): every token among the last
  `repeat_last_n` tokens of the context, the prompt included (llama.cpp feeds
  the prompt to its sampler too), has a positive logit divided by it and any
  other multiplied by it. 1 = off; last_n 0 = off, -1 = the whole context.
- `presence` / `frequency` (OpenAI's): logit[t] -= presence * (c[t] > 0) +
  frequency * c[t], where c[t] counts t among the tokens generated so far in
  this answer. The prompt does not count (OpenAI's definition: "how often the
  token was sampled prior to the current position").

The history of the row for position i is the committed tokens plus the draft
tokens before i, and the target row p_i and the draft row q_i are made from
the *same* history: that keeps speculative decoding lossless. `History` keeps
its counts incrementally: push a token as it is drafted or committed, truncate
on rejection (pushes and truncations are last-in first-out, so the list of
distinct generated tokens is kept in step without a search). Pure numpy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from . import defaults
from .errors import EdgespecError, require_integer, require_number


@dataclass(frozen=True)
class Penalties:
    presence: float = defaults.PRESENCE_PENALTY
    frequency: float = defaults.FREQUENCY_PENALTY
    repeat: float = defaults.REPEAT_PENALTY
    repeat_last_n: int = defaults.REPEAT_LAST_N
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias), ids unique

    @property
    def counting(self) -> bool:
        return self.presence != 0.0 or self.frequency != 0.0

    @property
    def repeating(self) -> bool:
        return self.repeat != 1.0 and self.repeat_last_n != 0

    @property
    def active(self) -> bool:
        """False for the defaults: then no row is touched and no history is kept."""
        return self.counting or self.repeating or bool(self.logit_bias)


def make_penalties(
    presence: float,
    frequency: float,
    repeat: float,
    repeat_last_n: int,
    logit_bias: Mapping[int, float] | None,
    n_vocab: int,
) -> Penalties:
    """Checked `Penalties` from a caller's values; an EdgespecError names what is wrong."""
    limit = defaults.PENALTY_LIMIT
    for name, value in (("presence_penalty", presence), ("frequency_penalty", frequency), ("repeat_penalty", repeat)):
        require_number(name, value)
    require_integer("repeat_last_n", repeat_last_n)
    for name, value in (("presence_penalty", presence), ("frequency_penalty", frequency)):
        if not -limit <= value <= limit:
            raise EdgespecError(f"{name} must be between -{limit:g} and {limit:g} (got {value})")
    low, high = defaults.REPEAT_PENALTY_RANGE
    if not low <= repeat <= high:
        raise EdgespecError(f"repeat_penalty must be between {low:g} and {high:g} (1 = off; got {repeat})")
    if repeat_last_n < -1:
        raise EdgespecError(f"repeat_last_n must be >= -1 (-1 = the whole context, 0 = off; got {repeat_last_n})")
    if logit_bias is not None and not isinstance(logit_bias, Mapping):
        raise EdgespecError(f"logit_bias must map token ids to biases (got {type(logit_bias).__name__})")
    bias: dict[int, float] = {}
    for token, value in (logit_bias or {}).items():
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or not 0 <= token < n_vocab:
            raise EdgespecError(f"logit_bias: token id {token!r} is not in the vocabulary (0..{n_vocab - 1})")
        lim = defaults.LOGIT_BIAS_LIMIT
        require_number(f"logit_bias: the bias of token {token}", value)
        if not -lim <= value <= lim:
            raise EdgespecError(f"logit_bias: the bias of token {token} must be between -{lim:g} and {lim:g}")
        if value:
            bias[int(token)] = float(value)
    return Penalties(float(presence), float(frequency), float(repeat), int(repeat_last_n), tuple(bias.items()))


class History:
    """The tokens a row is conditioned on (prompt, committed, drafted), with the counts the
    penalties need kept up to date as tokens are pushed and truncated."""

    def __init__(self, pen: Penalties, n_vocab: int, prompt: Sequence[int]) -> None:
        self.pen = pen
        self.n_vocab = n_vocab
        self.n_prompt = self.n = len(prompt)
        self._tokens = np.zeros(max(256, 2 * self.n), dtype=np.intp)
        self._tokens[: self.n] = prompt  # the prompt only counts for the repeat window
        # c[t] over generated tokens, and the distinct ids with c > 0 in order of appearance
        self._count = np.zeros(n_vocab, dtype=np.int32) if pen.counting else None
        self._seen = np.zeros(256, dtype=np.intp)
        self._n_seen = 0
        self._bias_ids = np.array([t for t, _ in pen.logit_bias], dtype=np.intp)
        self._bias = np.array([b for _, b in pen.logit_bias], dtype=np.float64)

    def push(self, token: int) -> None:
        if self.n == self._tokens.size:
            self._tokens = np.concatenate((self._tokens, np.zeros_like(self._tokens)))
        self._tokens[self.n] = token
        self.n += 1
        if self._count is not None:
            self._count[token] += 1
            if self._count[token] == 1:
                if self._n_seen == self._seen.size:
                    self._seen = np.concatenate((self._seen, np.zeros_like(self._seen)))
                self._seen[self._n_seen] = token
                self._n_seen += 1

    def extend(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            self.push(t)

    def truncate(self, n: int) -> None:
        """Forget every token from position n on (a rejected draft, a step's re-verification)."""
        assert n >= self.n_prompt, "the prompt is never rolled back"
        while self.n > n:
            self.n -= 1
            if self._count is not None:
                token = int(self._tokens[self.n])
                self._count[token] -= 1
                if self._count[token] == 0:
                    self._n_seen -= 1
                    assert self._seen[self._n_seen] == token  # last in, first out

    def tokens(self) -> np.ndarray:
        return self._tokens[: self.n]

    def apply(self, row: np.ndarray) -> np.ndarray:
        """A penalised copy of one logits row (the row itself, often llama.cpp's buffer, is left as it is).
        A row may be shorter than the vocabulary (a draft's, cut to the ids both models share):
        ids past its end are skipped."""
        out = row.copy()
        n = out.shape[0]
        pen = self.pen
        if self._bias_ids.size:
            ids, bias = self._bias_ids, self._bias
            if n < self.n_vocab:
                ids, bias = ids[ids < n], bias[ids < n]
            out[ids] += bias
        if pen.repeating:
            start = max(0, self.n - pen.repeat_last_n) if pen.repeat_last_n > 0 else 0
            ids = self._tokens[start : self.n]
            if n < self.n_vocab:
                ids = ids[ids < n]
            # repeated ids read the same value and write the same result: each token is penalised once
            vals = out[ids]
            out[ids] = np.where(vals > 0, vals / pen.repeat, vals * pen.repeat)
        if self._count is not None and self._n_seen:
            ids = self._seen[: self._n_seen]
            if n < self.n_vocab:
                ids = ids[ids < n]
            out[ids] -= pen.presence + pen.frequency * self._count[ids]
        return out
