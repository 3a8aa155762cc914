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

import functools
import json
from collections.abc import Sequence
from typing import Any

import llguidance
import numpy as np

from .errors import EdgespecError

MAX_SCHEMA_CHARS = 256 * 1024  # a schema larger than this is refused before compiling
KEEP_MASKS = 64  # masks kept behind the current position: more than one step's drafts


def compile_grammar(*, json_schema: Any = None, lark: str | None = None, regex: str | None = None) -> str:
    """The grammar (llguidance's serialized form) for exactly one of a JSON schema (a dict, a
    JSON string, or True for any JSON object), a Lark grammar or a regular expression."""
    given = [x is not None for x in (json_schema, lark, regex)]
    if sum(given) != 1:
        raise EdgespecError("give exactly one of json_schema, grammar (Lark) or regex")
    if json_schema is not None:
        return _compiled("JSON schema", _schema_text(json_schema))
    for name, value in (("grammar", lark), ("regex", regex)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            shown = f"{type(value).__name__} {str(value)[:40]!r}"
            raise EdgespecError(f"{name} must be a non-empty string (got {shown})")
    if lark is not None:
        if len(lark) > MAX_SCHEMA_CHARS:
            raise EdgespecError(f"the grammar is {len(lark)} characters; the limit is {MAX_SCHEMA_CHARS}")
        return _compiled("grammar", lark)
    assert regex is not None
    return _compiled("regular expression", regex)


@functools.lru_cache(maxsize=32)
def _compiled(what: str, text: str) -> str:
    """One source's grammar, checked; kept for the next request that asks the same (a server checks a
    request's schema before it queues and the engine again; tools compile each function, then all)."""
    if what == "JSON schema":
        # compact JSON (no runs of whitespace between items): what clients expect, and a small
        # model cannot pad its answer with newlines until max_tokens runs out
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(text, defaults={"whitespace_flexible": False})
        except ValueError as err:
            raise EdgespecError(f"the JSON schema cannot be used: {_reason(str(err))}") from None
    elif what == "grammar":
        grammar = llguidance.LLMatcher.grammar_from_lark(text)
    else:
        grammar = llguidance.LLMatcher.grammar_from_regex(text)
    return _checked(grammar, what)


def _schema_text(schema: Any) -> str:
    """The schema as JSON text: a dict, JSON text, a Pydantic model class (its
    `model_json_schema()`), or True for JSON mode (any JSON object)."""
    if schema is True:
        schema = {"type": "object"}  # JSON mode: any JSON object
    elif isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        schema = schema.model_json_schema()
    try:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        if len(text) > MAX_SCHEMA_CHARS:
            raise EdgespecError(f"the JSON schema is {len(text)} characters; the limit is {MAX_SCHEMA_CHARS}")
        value = json.loads(text)
    except RecursionError:
        raise EdgespecError("the JSON schema is nested too deeply to read; flatten it with $defs") from None
    except (TypeError, ValueError) as err:
        raise EdgespecError(f"the JSON schema is not valid JSON ({err}); fix it and retry") from None
    if value is True:  # JSON Schema's `true`: any JSON value
        text = "{}"
    elif not isinstance(value, dict):
        shown = " ".join(text[:40].split())  # one line, whatever the file's layout
        raise EdgespecError(f"a JSON schema is an object (a dict), not {type(value).__name__}: {shown}")
    return text


def _checked(grammar: str, what: str) -> str:
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise EdgespecError(f"the {what} cannot be used: {_reason(str(error))}")
    return grammar


def _reason(error: str) -> str:
    """llguidance's reason on one line: a regex error's text comes on several ("regex parse
    error:", the pattern, a caret line, "error: look-around ... is not supported")."""
    lines = [ln.strip() for ln in error.splitlines() if any(c.isalnum() for c in ln)]
    return " ".join(lines)[:300] or "invalid"


def _state_free(error: str) -> str:
    """A matcher's error without the parser state it dumps after it ("<state> Tokens: ...")."""
    return _reason(error.split("<state>")[0])[:200]


class Grammar:
    """One generation's matcher: `n` tokens consumed; `apply(row)` masks a logits row."""

    def __init__(self, tokenizer: Any, grammar: str, n_vocab: int) -> None:
        self._m = llguidance.LLMatcher(tokenizer, grammar)
        self._make = lambda: llguidance.LLMatcher(tokenizer, grammar)  # a fresh one (an error outlives reset())
        self._eos = set(getattr(tokenizer, "eos_tokens", None) or [tokenizer.eos_token])
        if self._m.is_error():
            raise EdgespecError(f"the grammar cannot be used: {self._m.get_error()[:300]}")
        self.n_vocab = n_vocab
        self.n = 0  # tokens followed
        self._real = 0  # ... of which the matcher consumed (none after it stopped)
        # tokens consumed so far (kept past a rollback) and the mask after each prefix: verifying
        # a step re-walks the states its drafting walked, and a mask costs a pass of the matcher
        self._seen: list[int] = []
        self._masks: dict[int, np.ndarray] = {}
        self._committed = 0  # tokens of the answer itself (`commit`): a dead end there is an error
        self.allowed()  # a schema that can never finish (a $ref with no way out) fails here, before a token

    def allowed(self) -> np.ndarray:
        """Which token ids the grammar allows next (bool, n_vocab)."""
        mask = self._masks.get(self._real)
        if mask is None:
            bits = np.frombuffer(self._m.compute_bitmask(), dtype=np.uint8)
            mask = self._masks[self._real] = np.unpackbits(bits, bitorder="little")[: self.n_vocab].astype(bool)
        # a dead end (its mask allows only the end: broken JSON with finish "stop") is an error on
        # the answer's own path; on a draft's it is a branch the target may never take
        if self._real <= self._committed and self._m.is_error():
            raise EdgespecError(
                f"the grammar cannot go on after {self._real} tokens ({_state_free(self._m.get_error())}); "
                "a schema whose $ref recursion never ends cannot be matched: make each recursive field "
                "optional or anyOf with null"
            )
        return mask

    def apply(self, row: np.ndarray) -> np.ndarray:
        """A copy of `row` with every token the grammar forbids at -inf."""
        out = np.array(row[: self.n_vocab], dtype=np.float32, copy=True)
        out[~self.allowed()[: out.shape[0]]] = -np.inf  # a draft row may be a little shorter
        return out

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens` the grammar accepts in a row, from the current state. A proposal
        is also cut before an end-of-generation token (the matcher's validation lets one pass
        that consuming refuses; the target emits the end itself when the grammar allows it)."""
        n = int(self._m.validate_tokens(list(tokens))) if tokens else 0
        return next((i for i, t in enumerate(tokens[:n]) if t in self._eos), n)

    def extend(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            t = int(t)
            if self._m.is_stopped():
                # past the end (a draft that ran on after end-of-generation): nothing to check,
                # but the positions count, so a rollback to before the end stays exact
                self.n += 1
                continue
            if not self._m.consume_token(t):
                raise EdgespecError(f"the grammar refused token {t}: {_state_free(self._m.get_error())}")
            if self._real < len(self._seen) and self._seen[self._real] != t:
                # another token than last time at this position: later masks are stale
                del self._seen[self._real :]
                self._masks = {j: m for j, m in self._masks.items() if j <= self._real}
            if self._real == len(self._seen):
                self._seen.append(t)
            self._real += 1
            self.n += 1
        if len(self._masks) > 2 * KEEP_MASKS:  # a rollback never reaches further back than a step
            self._masks = {j: m for j, m in self._masks.items() if j > self._real - KEEP_MASKS}

    def truncate(self, n: int) -> None:
        if n < self.n:
            keep = min(n, self._real)
            if keep < self._real:
                self._m.rollback(self._real - keep)
                self._real = keep
            if self._m.is_error():  # a draft's dead end: the matcher stays in error past a rollback
                self._m = self._make()
                for t in self._seen[: self._real]:
                    self._m.consume_token(t)
            self.n = n

    def commit(self) -> None:
        """The tokens followed so far are the answer's (verified), not a draft's."""
        self._committed = self._real

    @property
    def done(self) -> bool:
        return bool(self._m.is_stopped())
