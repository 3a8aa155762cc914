"""OpenAI's wire format for edgespec's server: the error shape and the response JSON.

Responses and stream chunks follow OpenAI's chat.completion / text_completion
objects, plus `speculation` (draft_n, draft_n_accepted, steps, acceptance, ...)
next to `usage`; a stream carries both in its last chunk. Log probabilities, when
asked, are in OpenAI's shapes: `{"content": [{token, logprob, bytes,
top_logprobs}]}` for chat, `{tokens, token_logprobs, top_logprobs, text_offset}`
for completions; a chunk carries those of its own tokens. With tools, the answer
goes through the tool-call parser: calls come out as `message.tool_calls` (a
stream sends each as OpenAI does, a delta with its id and name, then one with its
arguments) with finish_reason "tool_calls". The request models are in fields.py.
"""

from __future__ import annotations

import codecs
import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from edgespec import CallParser, StreamEvent, TokenLogprob, ToolCall, ToolSet
from edgespec.core.tools import called_finish

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
        self._text = codecs.getincrementaldecoder("utf-8")("replace")  # the tokens' bytes so far, as text

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

    def chunks(self, event: StreamEvent) -> list[dict[str, Any]]:
        """The stream chunks for one event's text and log probabilities (not its end)."""
        if event.text or event.logprobs:  # (tokens whose text is held back still carry their logprobs)
            return [self.chunk(event.text, None, lps=event.logprobs)]
        return []


class ChatFormat(Format):
    prefix = "chatcmpl"

    def __init__(self, model: str, piece: Callable[[int], bytes] = lambda t: b"", tools: ToolSet | None = None):
        super().__init__(model, piece)
        self.tools = tools
        self._parser: CallParser | None = tools.parser() if tools is not None else None
        self._forced = tools is not None and tools.choice != "auto"  # calls, no text: as OpenAI's, content null
        self._n_calls = 0

    def logprobs(self, lps: Sequence[TokenLogprob] | None) -> dict[str, Any] | None:
        if lps is None:
            return None
        content = [
            {**self._token(lp.token, lp.logprob), "top_logprobs": [self._token(t, v) for t, v in lp.top]} for lp in lps
        ]
        return {"content": content, "refusal": None}

    def whole(self, text: str, event: StreamEvent, lps: Sequence[TokenLogprob] | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = event.finish_reason
        if self.tools is not None and finish is not None:
            message["content"], finish, calls = self.tools.answer(text, finish)
            if calls:
                message["tool_calls"] = [c.openai() for c in calls]
        choice = {"index": 0, "message": message, "logprobs": self.logprobs(lps), "finish_reason": finish}
        return {**self._head("chat.completion"), "choices": [choice], **self._tail(event)}

    def chunk(
        self,
        text: str | None,
        final: StreamEvent | None,
        first: bool = False,
        lps: Sequence[TokenLogprob] | None = None,
    ) -> dict[str, Any]:
        delta = (
            {"role": "assistant", "content": None if self._forced else ""}
            if first
            else {}
            if text is None
            else {"content": text}
        )
        choice = {
            "index": 0,
            "delta": delta,
            "logprobs": self.logprobs(lps),
            "finish_reason": self._final_reason(final) if final else None,
        }
        out = {**self._head("chat.completion.chunk"), "choices": [choice]}
        return {**out, **self._tail(final)} if final else out

    def _final_reason(self, event: StreamEvent) -> str | None:
        reason = event.finish_reason
        return called_finish(reason, self._n_calls > 0) if reason is not None else None

    def chunks(self, event: StreamEvent) -> list[dict[str, Any]]:
        if self._parser is None:
            return super().chunks(event)
        pieces = self._parser.feed(event.text)
        if event.finish_reason is not None:
            pieces += self._parser.finish()
        out: list[dict[str, Any]] = []
        for piece in pieces:
            if isinstance(piece, str):
                out.append(self.chunk(piece, None))
            else:
                out += self._call_chunks(piece)
        if event.logprobs:  # the tokens' log probabilities ride on the first chunk of their event
            if not out:
                out.append(self.chunk(None, None))
            out[0]["choices"][0]["logprobs"] = self.logprobs(event.logprobs)
        return out

    def _call_chunks(self, call: ToolCall) -> list[dict[str, Any]]:
        """A call as OpenAI streams one: its id, type and name (arguments ""), then the arguments."""
        index, self._n_calls = self._n_calls, self._n_calls + 1
        head = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        out = []
        for delta in (
            {"tool_calls": [head]},
            {"tool_calls": [{"index": index, "function": {"arguments": call.arguments}}]},
        ):
            chunk = self.chunk(None, None)
            chunk["choices"][0]["delta"] = delta
            out.append(chunk)
        return out


class TextFormat(Format):
    prefix = "cmpl"

    def logprobs(self, lps: Sequence[TokenLogprob] | None) -> dict[str, Any] | None:
        """The legacy shape; each top_logprobs dict also holds the chosen token, as OpenAI's does.
        A token that is not whole UTF-8 on its own (a part of an emoji's bytes) is written as
        OpenAI writes it, "bytes:\\xf0\\x9f": as text, several would be the same key. A token's
        text_offset counts the characters completed before it (a character's later parts
        share its first part's offset), as llama-cpp-python measures it."""
        if lps is None:
            return None
        out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for lp in lps:
            raw = self.piece(lp.token)
            chosen = _legacy(raw)
            top = {_legacy(self.piece(t)): max(v, LOGPROB_FLOOR) for t, v in lp.top}
            out["tokens"].append(chosen)
            out["token_logprobs"].append(max(lp.logprob, LOGPROB_FLOOR))
            out["top_logprobs"].append({**top, chosen: max(lp.logprob, LOGPROB_FLOOR)})
            out["text_offset"].append(self.offset)
            self.offset += len(self._text.decode(raw))
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


def _legacy(raw: bytes) -> str:
    """A token's text in the legacy logprobs: as is, or "bytes:\\xNN..." where it is not whole UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)
