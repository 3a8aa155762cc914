"""What a generation produces: stream events, the final result, and stats.

Every frontend (CLI, TUI, server, embedding apps) consumes these types only.
Stats use the same names everywhere; `Stats.as_dict()` is what `--json`, the
server's responses and the TUI's status bar read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from .tools import ToolCall


class Segment(NamedTuple):
    """A piece of a step's text and where its tokens came from: "draft" (a draft model's
    token the target accepted), "lookup" (a token copied from the context by prompt lookup
    that the target accepted) or "target" (the target's own correction or bonus token)."""

    text: str
    source: str


class TokenLogprob(NamedTuple):
    """The target's log probability of one emitted token, from its raw logits (before
    penalties, bias and temperature, as OpenAI reports them), and of its `top` most likely
    alternatives at that position, best first: (token id, log probability)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass
class Stats:
    """Running statistics of one generation (updated once per step)."""

    n_prompt: int = 0  # prompt tokens
    n_prefilled: int = 0  # prompt tokens actually evaluated (the rest came from the cache)
    n_generated: int = 0  # tokens emitted to the caller
    n_drafted: int = 0  # draft tokens proposed (llama.cpp: draft_n)
    n_accepted: int = 0  # draft tokens accepted (llama.cpp: draft_n_accepted)
    steps: int = 0  # speculative steps (target forward passes after prefill)
    k: int = 0  # K the controller chose for the last step (0 = plain decoding)
    sources: dict[str, dict[str, int]] = field(default_factory=dict)  # per draft source: drafted, accepted
    accepted_per_position: list[int] = field(default_factory=list)
    drafted_per_position: list[int] = field(default_factory=list)
    prefill_s: float = 0.0
    decode_s: float = 0.0  # wall time after prefill
    draft_s: float = 0.0  # time inside the draft model
    verify_s: float = 0.0  # time inside the target model (after prefill)
    elapsed_s: float = 0.0  # prefill + decode
    speculative: bool = True
    est_speedup: float | None = None  # vs plain decoding, from measured costs

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.n_generated / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.n_generated / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def python_s(self) -> float:
        """Decode time spent outside both models: sampling, verify, bookkeeping."""
        return max(0.0, self.decode_s - self.draft_s - self.verify_s)

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = asdict(self)
        d["acceptance_rate"] = round(self.acceptance_rate, 4)
        d["tokens_per_step"] = round(self.tokens_per_step, 3)
        d["tokens_per_s"] = round(self.tokens_per_s, 2)
        d["python_s"] = round(self.python_s, 4)
        for key in ("prefill_s", "decode_s", "draft_s", "verify_s", "elapsed_s"):
            d[key] = round(float(d[key]), 4)  # type: ignore[arg-type]
        return d


@dataclass(frozen=True)
class StreamEvent:
    """One speculative step's worth of output.

    `text` is the newly committed text (never half a UTF-8 character; text that
    may still become a stop string is held back until it cannot), and
    `segments` the same text split by source (their texts join to `text`).
    `tokens` are the new token ids, `from_draft[i]` says whether tokens[i] was
    a draft token the target accepted (False: the target's own correction or
    bonus token). `k` is the K the controller chose for the step (a step near
    max_tokens or the context end may draft fewer). `finish_reason` is set on
    the last event only: "stop" (end-of-generation token or stop string),
    "length" (max_tokens or the context limit) or "cancelled". `logprobs`
    (when the generation asked for them) has one entry per token of `tokens`.
    """

    text: str
    tokens: tuple[int, ...]
    from_draft: tuple[bool, ...]
    stats: Stats
    finish_reason: str | None = None
    segments: tuple[Segment, ...] = ()
    k: int = 0
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True)
class Result:
    text: str  # with tools: the answer without its calls
    tokens: list[int]
    finish_reason: str  # "tool_calls" when the model called tools
    stats: Stats
    warnings: list[str]
    tool_calls: list[ToolCall] = field(default_factory=list)
