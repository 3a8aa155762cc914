"""OpenAI's wire format for edgespec's server: the error shape and the response JSON.

Responses and stream chunks follow OpenAI's chat.completion / text_completion
objects, plus `speculation` (draft_n, draft_n_accepted, steps, acceptance, ...)
next to `usage`; a stream carries both in its last chunk. Log probabilities, when
asked, are in OpenAI's shapes: `{"content": [{token, logprob, bytes,
top_logprobs}]}` for chat, `{tokens, token_logprobs, top_logprobs, text_offset}`
for completions; a chunk carries those of its own tokens. The request models are
in fields.py.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from edgespec import StreamEvent, TokenLogprob

LOGPROB_FLOOR = -9999.0  # what OpenAI reports for a token of probability 0 (JSON has no -inf)


# -- errors -------------------------------------------------------------------------
class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


ERRORS: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorBody, "description": "a bad request, key, Host header or body size"},
    503: {"model": ErrorBody, "description": "too many requests waiting; see Retry-After"},
}
COMPLETION_RESPONSES = {
    **ERRORS,
    200: {
        "description": "a completion; an event stream when `stream` is true",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    },
}


def sse_data(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


# -- OpenAI JSON -------------------------------------------------------------------
def usage(event: StreamEvent) -> dict[str, Any]:
    s = event.stats
    return {
        "prompt_tokens": s.n_prompt,
        "completion_tokens": s.n_generated,
        "total_tokens": s.n_prompt + s.n_generated,
        "prompt_tokens_details": {"cached_tokens": max(0, s.n_prompt - s.n_prefilled)},
    }


def speculation(event: StreamEvent) -> dict[str, Any]:
    s = event.stats
    return {
        "draft_n": s.n_drafted,
        "draft_n_accepted": s.n_accepted,
        "steps": s.steps,
        "acceptance": round(s.acceptance_rate, 4),
        "k": s.k,
        "speculative": s.speculative,
        "tokens_per_step": round(s.tokens_per_step, 3),
        "tokens_per_s": round(s.tokens_per_s, 2),
        "sources": {name: dict(counts) for name, counts in s.sources.items()},  # model / lookup
    }


class Format:
    prefix = ""

    def __init__(self, model: str, piece: Callable[[int], bytes] = lambda t: b"") -> None:
        self.model = model
        self.piece = piece  # a token's bytes
        self.id = f"{self.prefix}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.offset = 0  # characters of text before the next token (completions' text_offset)

    def _token(self, token: int, logprob: float) -> dict[str, Any]:
        raw = self.piece(token)
        return {"token": raw.decode("utf-8", "replace"), "logprob": max(logprob, LOGPROB_FLOOR), "bytes": list(raw)}

    def logprobs(self, lps: Sequence[TokenLogprob] | None) -> dict[str, Any] | None:
        raise NotImplementedError

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def _tail(self, event: StreamEvent) -> dict[str, Any]:
        return {"usage": usage(event), "speculation": speculation(event)}

    def whole(self, text: str, event: StreamEvent, lps: Sequence[TokenLogprob] | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def chunk(
        self,
        text: str | None,
        final: StreamEvent | None,
        first: bool = False,
        lps: Sequence[TokenLogprob] | None = None,
    ) -> dict[str, Any]:
        raise NotImplementedError


class ChatFormat(Format):
    prefix = "chatcmpl"

    def logprobs(self, lps: Sequence[TokenLogprob] | None) -> dict[str, Any] | None:
        if lps is None:
            return None
        content = [
            {**self._token(lp.token, lp.logprob), "top_logprobs": [self._token(t, v) for t, v in lp.top]} for lp in lps
        ]
        return {"content": content, "refusal": None}

    def whole(self, text: str, event: StreamEvent, lps: Sequence[TokenLogprob] | None = None) -> dict[str, Any]:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": self.logprobs(lps),
            "finish_reason": event.finish_reason,
        }
        return {**self._head("chat.completion"), "choices": [choice], **self._tail(event)}

    def chunk(
        self,
        text: str | None,
        final: StreamEvent | None,
        first: bool = False,
        lps: Sequence[TokenLogprob] | None = None,
    ) -> dict[str, Any]:
        delta = {"role": "assistant", "content": ""} if first else {} if text is None else {"content": text}
        choice = {
            "index": 0,
            "delta": delta,
            "logprobs": self.logprobs(lps),
            "finish_reason": final.finish_reason if final else None,
        }
        out = {**self._head("chat.completion.chunk"), "choices": [choice]}
        return {**out, **self._tail(final)} if final else out


class TextFormat(Format):
    prefix = "cmpl"

    def logprobs(self, lps: Sequence[TokenLogprob] | None) -> dict[str, Any] | None:
        """The legacy shape; each top_logprobs dict also holds the chosen token, as OpenAI's does."""
        if lps is None:
            return None
        out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for lp in lps:
            chosen = self._token(lp.token, lp.logprob)
            top = {self._token(t, v)["token"]: max(v, LOGPROB_FLOOR) for t, v in lp.top}
            out["tokens"].append(chosen["token"])
            out["token_logprobs"].append(chosen["logprob"])
            out["top_logprobs"].append({**top, chosen["token"]: chosen["logprob"]})
            out["text_offset"].append(self.offset)
            self.offset += len(chosen["token"])
        return out

    def whole(self, text: str, event: StreamEvent, lps: Sequence[TokenLogprob] | None = None) -> dict[str, Any]:
        choice = {"index": 0, "text": text, "logprobs": self.logprobs(lps), "finish_reason": event.finish_reason}
        return {**self._head("text_completion"), "choices": [choice], **self._tail(event)}

    def chunk(
        self,
        text: str | None,
        final: StreamEvent | None,
        first: bool = False,
        lps: Sequence[TokenLogprob] | None = None,
    ) -> dict[str, Any]:
        choice = {
            "index": 0,
            "text": text or "",
            "logprobs": self.logprobs(lps),
            "finish_reason": final.finish_reason if final else None,
        }
        out = {**self._head("text_completion"), "choices": [choice]}
        return {**out, **self._tail(final)} if final else out
