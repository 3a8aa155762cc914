"""Structured output: a grammar that constrains every row of the sampling transform.

A `Grammar` wraps llguidance's matcher (the engine llama.cpp, vLLM and SGLang
use: JSON Schema, Lark-like grammars, regular expressions) over the target's
tokenizer. It follows the tokens of one generation the way the penalties'
history does: the committed tokens, then the draft tokens before position i,
so the mask of position i is the same for the target row p_i and the draft row
q_i (that is what keeps rejection sampling exact under a constraint), and a
rejection rolls it back. A draft token the grammar forbids is never proposed:
model drafts are sampled from masked rows, and a lookup proposal is cut at its
first invalid token. When the grammar is complete only end-of-generation is
allowed, so the generation ends there.

`compile_grammar` checks a schema or grammar once, before any generation, and
raises EdgespecError with llguidance's reason when it is invalid. The matcher
is native code, but it holds no model and does no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import llguidance
import numpy as np

from .errors import EdgespecError

MAX_SCHEMA_CHARS = 256 * 1024  # a schema larger than this is refused before compiling


def compile_grammar(*, json_schema: Any = None, lark: str | None = None, regex: str | None = None) -> str:
    """The grammar (llguidance's serialized form) for exactly one of a JSON schema (a dict, a
    JSON string, or True for any JSON object), a Lark grammar or a regular expression."""
    given = [x is not None for x in (json_schema, lark, regex)]
    if sum(given) != 1:
        raise EdgespecError("give exactly one of json_schema, grammar (Lark) or regex")
    if json_schema is not None:
        text = _schema_text(json_schema)
        return _checked(llguidance.LLMatcher.grammar_from_json_schema(text), "JSON schema")
    if lark is not None:
        if len(lark) > MAX_SCHEMA_CHARS:
            raise EdgespecError(f"the grammar is {len(lark)} characters; the limit is {MAX_SCHEMA_CHARS}")
        return _checked(llguidance.LLMatcher.grammar_from_lark(lark), "grammar")
    assert regex is not None
    return _checked(llguidance.LLMatcher.grammar_from_regex(regex), "regular expression")


def _schema_text(schema: Any) -> str:
    if schema is True:
        schema = {"type": "object"}  # JSON mode: any JSON object
    text = schema if isinstance(schema, str) else json.dumps(schema)
    if len(text) > MAX_SCHEMA_CHARS:
        raise EdgespecError(f"the JSON schema is {len(text)} characters; the limit is {MAX_SCHEMA_CHARS}")
    try:
        json.loads(text)
    except ValueError as err:
        raise EdgespecError(f"the JSON schema is not valid JSON ({err}); fix it and retry") from None
    return text


def _checked(grammar: str, what: str) -> str:
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else "invalid"
        raise EdgespecError(f"the {what} cannot be used: {first[:300]}")
    return grammar


class Grammar:
    """One generation's matcher: `n` tokens consumed; `apply(row)` masks a logits row."""

    def __init__(self, tokenizer: Any, grammar: str, n_vocab: int) -> None:
        self._m = llguidance.LLMatcher(tokenizer, grammar)
        if self._m.is_error():
            raise EdgespecError(f"the grammar cannot be used: {self._m.get_error()[:300]}")
        self.n_vocab = n_vocab
        self.n = 0
        self._mask: np.ndarray | None = None  # of the current state

    def allowed(self) -> np.ndarray:
        """Which token ids the grammar allows next (bool, n_vocab)."""
        if self._mask is None:
            bits = np.frombuffer(self._m.compute_bitmask(), dtype=np.uint8)
            self._mask = np.unpackbits(bits, bitorder="little")[: self.n_vocab].astype(bool)
        return self._mask

    def apply(self, row: np.ndarray) -> np.ndarray:
        """A copy of `row` with every token the grammar forbids at -inf."""
        out = np.array(row[: self.n_vocab], dtype=np.float32, copy=True)
        out[~self.allowed()] = -np.inf
        return out

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens` the grammar accepts in a row, from the current state."""
        return int(self._m.validate_tokens(list(tokens))) if tokens else 0

    def extend(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            if not self._m.consume_token(int(t)):
                raise EdgespecError(f"the grammar refused token {t}: {self._m.get_error()[:200]}")
            self.n += 1
        if tokens:
            self._mask = None

    def truncate(self, n: int) -> None:
        if n < self.n:
            self._m.rollback(self.n - n)
            self.n = n
            self._mask = None

    @property
    def done(self) -> bool:
        return bool(self._m.is_stopped())
