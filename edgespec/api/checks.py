"""The checks `Engine.stream` runs on a request's options before anything is queued: each
failure is one EdgespecError line that names the option and its range."""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np

from ..core import defaults
from ..core.errors import EdgespecError, require_integer, require_number
from ..core.grammar import compile_grammar
from ..core.penalties import make_penalties
from ..core.sampling import SamplingParams
from ..core.tools import ToolSet

CLOSED = "this engine is closed; load a new one"


def busy(waited_s: float, own: bool) -> str:
    """BusyError's words: what holds the engine, and what ends it."""
    if own:  # (a stream kept in a variable and left after a `break`, say)
        return (
            f"a stream read in this thread and left unfinished has held this engine for {waited_s:g} s; "
            "close it (gen.close(), or read it in a `with engine.stream(...) as gen:` block)"
        )
    return (
        f"another generation has held this engine for {waited_s:g} s; it ends when its stream is "
        "exhausted or closed (gen.cancel() ends it at its next read)"
    )


class Closed:
    """What a closed engine's target and prompts become: any use is that one clear error, not
    native code reading a freed model (which segfaulted: tokenize, piece, generate)."""

    def __getattr__(self, name: str) -> NoReturn:
        raise EdgespecError(CLOSED)


def check_params(p: SamplingParams, max_tokens: int, k: int | None, logprobs: int | None = None) -> None:
    for name, number in (("temperature", p.temperature), ("top_p", p.top_p), ("min_p", p.min_p)):
        require_number(name, number)
    require_integer("top_k", p.top_k)
    require_integer("max_tokens", max_tokens)
    for name, whole in (("seed", p.seed), ("logprobs", logprobs)):  # k: check_k
        if whole is not None:
            require_integer(name, whole)
    if not p.temperature >= 0:
        raise EdgespecError(f"temperature must be >= 0 (got {p.temperature})")
    if not 0 <= p.top_p <= 1:  # 0: the likeliest token only (as llama.cpp's, which keeps at least one)
        raise EdgespecError(f"top_p must be in [0, 1] (got {p.top_p})")
    if not 0 <= p.min_p <= 1:
        raise EdgespecError(f"min_p must be in [0, 1] (got {p.min_p})")
    if max_tokens < 1:
        raise EdgespecError(f"max_tokens must be >= 1 (got {max_tokens})")
    check_k(k)
    if p.seed is not None and not 0 <= p.seed < 2**63:
        raise EdgespecError(f"seed must be an integer from 0 to 2**63 - 1 (got {p.seed})")
    if logprobs is not None and not 0 <= logprobs <= defaults.TOP_LOGPROBS_LIMIT:
        raise EdgespecError(f"logprobs must be between 0 and {defaults.TOP_LOGPROBS_LIMIT} (got {logprobs})")


def check_stop(stop: Any) -> list[str]:
    """`stop` as a list of strings (None: none); anything else is one clear error, before anything runs."""
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if isinstance(stops, (list, tuple)) and all(isinstance(s, str) for s in stops):
        return list(stops)
    raise EdgespecError(f"stop must be a string or a list of strings (got {_kind(stop)})")


def check_token(token: Any, n_vocab: int) -> None:
    if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or not 0 <= token < n_vocab:
        raise EdgespecError(f"token id {token!r} is outside the vocabulary (0..{n_vocab - 1})")


def check_p_min(p_min: Any) -> None:
    require_number("p_min", p_min)
    if not 0 <= p_min <= 1:
        raise EdgespecError(f"p_min must be in [0, 1] (got {p_min})")


def _kind(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        odd = next(x for x in value if not isinstance(x, str))
        return f"a list holding {type(odd).__name__}"
    return type(value).__name__


def check_k(k: int | None) -> None:
    if k is not None:
        require_integer("k", k)
    if k is not None and not 0 <= k <= defaults.K_LIMIT:
        raise EdgespecError(f"k must be between 0 and {defaults.K_LIMIT} (got {k})")


def check_options(
    *,
    max_tokens: int | None = None,
    temperature: float = defaults.TEMPERATURE,
    top_k: int = defaults.TOP_K,
    top_p: float = defaults.TOP_P,
    min_p: float = defaults.MIN_P,
    seed: int | None = None,
    k: int | None = None,
    presence_penalty: float = defaults.PRESENCE_PENALTY,
    frequency_penalty: float = defaults.FREQUENCY_PENALTY,
    repeat_penalty: float = defaults.REPEAT_PENALTY,
    repeat_last_n: int = defaults.REPEAT_LAST_N,
    **_: object,
) -> None:
    """`Engine.stream`'s checks of these options, without an engine: what a command runs
    before minutes of loading (max_tokens None: the reply's own length)."""
    make_penalties(presence_penalty, frequency_penalty, repeat_penalty, repeat_last_n, None, 1)
    params = SamplingParams(temperature, top_k, top_p, min_p, seed)
    check_params(params, 1 if max_tokens is None else max_tokens, k)


def check_structured_output(json_schema: Any = None, grammar: Any = None, tools: Any = None) -> str | None:
    """What a request's structured output compiles to (llguidance's form; None: unconstrained):
    a JSON schema (a dict, JSON text, a Pydantic model class, or True for any JSON object), a Lark
    grammar, or the calls of `tools` (a ToolSet from `Engine.tools`). Anything that cannot be
    used is one EdgespecError with llguidance's reason: a server calls it before a request queues."""
    if tools is not None:
        if not isinstance(tools, ToolSet):
            raise EdgespecError(f"tools must be a ToolSet from Engine.tools(...), not {type(tools).__name__}")
        if json_schema is not None or grammar is not None:
            raise EdgespecError("tools cannot be combined with a JSON schema or a grammar")
        grammar = tools.grammar()
    if json_schema is None and grammar is None:
        return None
    return compile_grammar(json_schema=json_schema, lark=grammar)
