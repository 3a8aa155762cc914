"""OpenAI's wire format for edgespec's server: request models and response JSON.

Request models accept what OpenAI's clients send and ignore unknown fields;
wrong types fail validation (the app answers 400 in OpenAI's error shape).
Responses and stream chunks follow OpenAI's chat.completion / text_completion
objects, plus `speculation` (draft_n, draft_n_accepted, steps, acceptance, ...)
next to `usage`; a stream carries both in its last chunk.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from edgespec import StreamEvent, defaults

Stop = Annotated[str, Field(max_length=256)]


# -- requests -----------------------------------------------------------------------
def reject(message: str, param: str | None = None) -> NoReturn:
    """Fail validation with `message` as the whole 400 message (the app reads it from ctx)."""
    raise PydanticCustomError("invalid_request", "{message}", {"message": message, "param": param})


def _lone_surrogate(value: Any, path: str) -> str | None:
    """The path of the first string (key or value) that UTF-8 cannot encode, or None.
    JSON's \\ud800 escapes let lone surrogates in (Python's json even decodes them from raw bytes)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "the body"
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        where = f"{path}.{key}" if path else str(key)
        found = _lone_surrogate(key, f"a key in {path or 'the body'}") or _lone_surrogate(item, where)
        if found:
            return found
    return None


class Sampling(BaseModel):
    """Fields both endpoints share. Unknown fields are ignored, as OpenAI's clients expect."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        where = _lone_surrogate(data, "")
        if where is not None:
            reject(
                f"{where} is not valid Unicode: it holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape "
                "without its pair); send text as UTF-8 or as complete surrogate pairs",
                where.split(".")[0] if not where.startswith(("a key", "the body")) else None,
            )
        return data

    model: str | None = None
    max_tokens: int | None = Field(
        None, ge=1, description=f"default: the server's --max-tokens ({defaults.MAX_TOKENS}); clamped to the context"
    )
    temperature: float | None = Field(None, ge=0, description=f"default {defaults.TEMPERATURE}")
    top_p: float | None = Field(None, gt=0, le=1, description=f"default {defaults.TOP_P}")
    top_k: int | None = Field(None, description=f"extension; <= 0 disables it; default {defaults.TOP_K}")
    min_p: float | None = Field(None, ge=0, le=1, description=f"extension; default {defaults.MIN_P}")
    seed: int | None = Field(None, description="-1: random (as llama.cpp); any other integer, reduced mod 2**63")
    stop: Stop | Annotated[list[Stop], Field(max_length=16)] | None = None
    stream: bool | None = False
    n: int | None = Field(None, ge=1, le=1, description="only 1 is supported")
    speculative: bool | None = Field(None, description="extension; false: plain decoding")
    k: int | None = Field(None, ge=0, le=defaults.K_LIMIT, description="extension; fixed draft length")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str = ""


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: str
    content: str | list[TextPart] | None = None


class ChatRequest(Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)


class CompletionRequest(Sampling):
    prompt: str | Annotated[list[str], Field(min_length=1, max_length=1)] | list[int]


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


def message_text(content: str | list[TextPart] | None) -> str:
    if isinstance(content, list):
        return "".join(p.text for p in content)
    return content or ""


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
    }


class Format:
    prefix = ""

    def __init__(self, model: str) -> None:
        self.model = model
        self.id = f"{self.prefix}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def _tail(self, event: StreamEvent) -> dict[str, Any]:
        return {"usage": usage(event), "speculation": speculation(event)}

    def whole(self, text: str, event: StreamEvent) -> dict[str, Any]:
        raise NotImplementedError

    def chunk(self, text: str | None, final: StreamEvent | None, first: bool = False) -> dict[str, Any]:
        raise NotImplementedError


class ChatFormat(Format):
    prefix = "chatcmpl"

    def whole(self, text: str, event: StreamEvent) -> dict[str, Any]:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": event.finish_reason,
        }
        return {**self._head("chat.completion"), "choices": [choice], **self._tail(event)}

    def chunk(self, text: str | None, final: StreamEvent | None, first: bool = False) -> dict[str, Any]:
        delta = {"role": "assistant", "content": ""} if first else {} if text is None else {"content": text}
        choice = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": final.finish_reason if final else None,
        }
        out = {**self._head("chat.completion.chunk"), "choices": [choice]}
        return {**out, **self._tail(final)} if final else out


class TextFormat(Format):
    prefix = "cmpl"

    def whole(self, text: str, event: StreamEvent) -> dict[str, Any]:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": event.finish_reason}
        return {**self._head("text_completion"), "choices": [choice], **self._tail(event)}

    def chunk(self, text: str | None, final: StreamEvent | None, first: bool = False) -> dict[str, Any]:
        choice = {
            "index": 0,
            "text": text or "",
            "logprobs": None,
            "finish_reason": final.finish_reason if final else None,
        }
        out = {**self._head("text_completion"), "choices": [choice]}
        return {**out, **self._tail(final)} if final else out
