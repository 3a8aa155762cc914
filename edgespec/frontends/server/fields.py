"""The request models: every OpenAI field the server reads, honours or refuses.

A field is either honoured, an extension (top_k, min_p, repeat_penalty,
repeat_last_n, speculative, k), accepted with no effect (model, user,
metadata: they change nothing about the answer), or refused with a 400 that
says why: a field whose value would change the answer in a way the server
cannot (images, n > 1, audio, web search, echo, best_of, suffix, the legacy
`functions`) is never silently ignored. Unknown fields are ignored, as OpenAI's clients
expect. `reject` is how a check here words its own 400; wrong types fail
pydantic's validation, strict as OpenAI's is (`"max_tokens": "5"` or `true`, `"stream": "yes"`
are 400s, not coerced; an integer is a number), and the app answers both in OpenAI's error shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from edgespec import defaults

MAX_STOPS = 16
MAX_STOP_CHARS = 256
ROLES = ("system", "user", "assistant", "tool", "developer")
Stop = Annotated[str, Field(max_length=MAX_STOP_CHARS)]


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


def _unsupported(field: str, why: str) -> NoReturn:
    reject(f"'{field}' is not supported: {why}", field)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    include_usage: bool | None = Field(None, description="a last chunk with usage and no choices, as OpenAI's")


class Sampling(BaseModel):
    """Fields both endpoints share."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _valid_text(cls, data: Any) -> Any:
        where = _lone_surrogate(data, "")
        if where is not None:
            reject(
                f"{where} is not valid Unicode: it holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape "
                "without its pair); send text as UTF-8 or as complete surrogate pairs",
                where.split(".")[0] if not where.startswith(("a key", "the body")) else None,
            )
        if isinstance(data, dict):
            stop = data.get("stop")
            if isinstance(stop, list) and len(stop) > MAX_STOPS:
                reject(f"at most {MAX_STOPS} stop strings are allowed (got {len(stop)})", "stop")
            for s in stop if isinstance(stop, list) else [stop]:
                if isinstance(s, str) and len(s) > MAX_STOP_CHARS:
                    reject(f"a stop string may be at most {MAX_STOP_CHARS} characters (got {len(s)})", "stop")
        return data

    @model_validator(mode="after")
    def _honourable(self) -> Sampling:
        if self.stream_options is not None and not self.stream:
            reject("stream_options is only allowed when stream is true", "stream_options")
        if self.n is not None and self.n > 1:
            _unsupported("n", "one choice per request here; send n requests (with different seeds) instead")
        for key, value in (self.logit_bias or {}).items():
            if not key.isdigit():
                reject(f"logit_bias keys are token ids (as strings, like \"50256\"); got '{key}'", "logit_bias")
            if not -defaults.LOGIT_BIAS_LIMIT <= value <= defaults.LOGIT_BIAS_LIMIT:
                reject(f"logit_bias values must be between -100 and 100 (token {key}: {value})", "logit_bias")
        return self

    def engine_logit_bias(self) -> dict[int, float] | None:
        return {int(k): v for k, v in self.logit_bias.items()} if self.logit_bias else None

    def engine_logprobs(self) -> int | None:
        """`Engine.stream`'s logprobs: None (none), or how many alternatives per token."""
        return None

    model: str | None = Field(None, description="accepted and ignored: the server serves the pair it loaded")
    max_tokens: int | None = Field(
        None,
        ge=1,
        description=f"default: the server's --max-tokens ({defaults.MAX_TOKENS}); "
        f"capped by --max-tokens-cap ({defaults.MAX_TOKENS_CAP}) and the context",
    )
    temperature: float | None = Field(None, ge=0, le=2, description=f"0-2, as OpenAI's; default {defaults.TEMPERATURE}")
    top_p: float | None = Field(None, ge=0, le=1, description=f"0: the likeliest token only; default {defaults.TOP_P}")
    top_k: int | None = Field(None, description=f"extension; <= 0 disables it; default {defaults.TOP_K}")
    min_p: float | None = Field(None, ge=0, le=1, description=f"extension; default {defaults.MIN_P}")
    seed: int | None = Field(None, description="-1: random (as llama.cpp); any other integer, reduced mod 2**63")
    stop: Stop | Annotated[list[Stop], Field(max_length=MAX_STOPS)] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = Field(None, description="with stream: include_usage")
    user: str | None = Field(None, description="accepted and ignored")
    n: int | None = Field(None, ge=1, description="only 1 is supported")
    presence_penalty: float | None = Field(
        None, ge=-defaults.PENALTY_LIMIT, le=defaults.PENALTY_LIMIT, description="over the tokens generated so far"
    )
    frequency_penalty: float | None = Field(
        None, ge=-defaults.PENALTY_LIMIT, le=defaults.PENALTY_LIMIT, description="over the tokens generated so far"
    )
    repeat_penalty: float | None = Field(
        None,
        ge=defaults.REPEAT_PENALTY_RANGE[0],
        le=defaults.REPEAT_PENALTY_RANGE[1],
        description=f"extension (llama.cpp's); 1 = off; default {defaults.REPEAT_PENALTY}",
    )
    repeat_last_n: int | None = Field(
        None,
        ge=-1,
        description=f"extension; repeat_penalty's window, -1 = the whole context; default {defaults.REPEAT_LAST_N}",
    )
    logit_bias: dict[str, float] | None = Field(None, description="token id -> bias in -100..100")
    speculative: bool | None = Field(None, description="extension; false: plain decoding")
    k: int | None = Field(None, ge=0, le=defaults.K_LIMIT, description="extension; fixed draft length")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["text"]
    text: str


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    name: str = Field(max_length=64)
    arguments: str = "{}"  # JSON text, as OpenAI sends it


class ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _known(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        role = data.get("role")
        if isinstance(role, str) and role not in ROLES:
            reject(f"unknown role '{role}': use {', '.join(ROLES[:-1])} or {ROLES[-1]}", "messages")
        content = data.get("content")
        if content == []:
            reject("a message's content is a string or a non-empty list of text parts", "messages")
        for part in content if isinstance(content, list) else []:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and not isinstance(part.get("text"), str):
                reject(
                    'a text part is {"type": "text", "text": "..."}: its text is missing or not a string', "messages"
                )
            if kind in ("image_url", "input_image", "image"):
                reject("images are not supported: the server runs a text-only model; send text parts", "messages")
            if isinstance(kind, str) and kind != "text":
                reject(f"content parts of type '{kind}' are not supported; send text parts", "messages")
        if data.get("function_call"):
            reject("'function_call' in a message is the legacy form: send 'tool_calls'", "messages")
        if (
            isinstance(role, str)
            and data.get("content") is None
            and not (role == "assistant" and data.get("tool_calls"))
        ):
            reject(f"a {role} message needs its content (an assistant's may be its tool_calls alone)", "messages")
        if role == "tool" and not data.get("tool_call_id"):
            reject("a tool message needs the tool_call_id of the call it answers", "messages")
        return data

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[TextPart] | None = None  # an empty list is refused in _known, with its own words
    tool_calls: list[ToolCallIn] | None = Field(None, description="an assistant's calls, in the history")
    tool_call_id: str | None = Field(None, description="in a tool message: the call it answers")
    name: str | None = None

    def for_template(self) -> dict[str, Any]:
        """The message as the engine takes it ("developer" is OpenAI's newer name for "system",
        which chat templates know)."""
        out: dict[str, Any] = {"role": "system" if self.role == "developer" else self.role}
        out["content"] = message_text(self.content)
        if self.tool_calls:
            out["tool_calls"] = [c.model_dump() for c in self.tool_calls]
        for key in ("tool_call_id", "name"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out


class ChatRequest(Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, description="as max_tokens (and first, when both are set)")
    response_format: dict[str, Any] | None = Field(
        None, description='{"type": "text" | "json_object" | "json_schema", "json_schema": {"schema": ...}}'
    )
    tools: list[dict[str, Any]] | None = Field(None, description='[{"type": "function", "function": {...}}]')
    tool_choice: str | dict[str, Any] | None = Field(
        None, description='"auto" (default), "none", "required" or {"type": "function", "function": {"name": ...}}'
    )
    parallel_tool_calls: bool | None = Field(None, description="true: several calls per answer (default false)")
    functions: list[Any] | None = Field(None, description="legacy: send tools")
    function_call: str | dict[str, Any] | None = Field(None, description="legacy: send tool_choice")
    logprobs: bool | None = Field(None, description="the log probability of each token of the answer")
    top_logprobs: int | None = Field(
        None, ge=0, le=defaults.TOP_LOGPROBS_LIMIT, description="alternatives per token (with logprobs)"
    )
    modalities: list[str] | None = Field(None, description='only ["text"] is supported')
    audio: dict[str, Any] | None = Field(None, description="not supported")
    web_search_options: dict[str, Any] | None = Field(None, description="not supported")

    @model_validator(mode="after")
    def _chat_honourable(self) -> ChatRequest:
        self.engine_json_schema()  # a malformed response_format is a 400 before the queue
        called: set[str] = set()
        for i, m in enumerate(self.messages):
            called.update(c.id for c in m.tool_calls or ())
            if m.role == "tool" and m.tool_call_id not in called:
                reject(
                    f"messages[{i}] answers tool call '{m.tool_call_id}', which no earlier assistant message made; "
                    "a tool message follows the assistant message whose tool_calls it answers",
                    "messages",
                )
        if self.functions:
            _unsupported("functions", "it is the legacy form of tools; send tools")
        if self.function_call not in (None, "none", "auto"):
            _unsupported("function_call", "it is the legacy form of tool_choice; send tool_choice")
        if self.top_logprobs and not self.logprobs:
            reject("top_logprobs needs logprobs: true", "top_logprobs")
        if self.modalities and set(self.modalities) != {"text"} or self.audio is not None:
            _unsupported("modalities" if self.modalities else "audio", "the server answers in text only")
        if self.web_search_options is not None:
            _unsupported("web_search_options", "the server does not search the web")
        return self

    def engine_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def engine_json_schema(self) -> Any:
        """`Engine.stream`'s json_schema for response_format: None (text), True (any JSON
        object) or the schema; the schema itself is compiled (and refused) by the engine."""
        fmt = self.response_format
        if not fmt:
            return None
        kind = fmt.get("type", "text")
        if kind == "text":
            return None
        if kind == "json_object":
            return True
        if kind != "json_schema":
            reject(f"response_format.type must be text, json_object or json_schema (got {kind!r})", "response_format")
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            reject("response_format.json_schema must be an object with a 'schema' object", "response_format")
        return spec.get("schema") or True


class CompletionRequest(Sampling):
    prompt: str | Annotated[list[str], Field(min_length=1, max_length=1)] | list[int]
    echo: bool | None = Field(None, description="only false is supported")
    best_of: int | None = Field(None, ge=1, description="only 1 is supported")
    suffix: str | None = Field(None, description="only empty is supported")
    logprobs: int | None = Field(
        None, ge=0, le=5, description="the tokens' log probabilities, and this many alternatives"
    )

    @model_validator(mode="before")
    @classmethod
    def _one_prompt(cls, data: Any) -> Any:
        prompt = data.get("prompt") if isinstance(data, dict) else None
        if (
            isinstance(prompt, list)
            and prompt
            and (isinstance(prompt[0], list) or len(prompt) > 1 and isinstance(prompt[0], str))
        ):
            reject("a batch of prompts is not supported: send one prompt (a string or token ids) per request", "prompt")
        return data

    @model_validator(mode="after")
    def _completion_honourable(self) -> CompletionRequest:
        if self.echo:
            _unsupported("echo", "the prompt is not echoed back")
        if self.best_of is not None and self.best_of > 1:
            _unsupported("best_of", "one candidate per request here")
        if self.suffix:
            _unsupported("suffix", "no fill-in-the-middle")
        return self

    def engine_logprobs(self) -> int | None:
        return self.logprobs


def message_text(content: str | list[TextPart] | None) -> str:
    if isinstance(content, list):
        return "".join(p.text for p in content)
    return content or ""


UNPARSABLE = "There was an error parsing the body"  # FastAPI's 400 when json.loads raises other than a JSON error


def _line_column(body: str | bytes, pos: int) -> tuple[int, int]:
    """Where offset `pos` of a request body is, as a JSON error says it (1-based)."""
    nl = b"\n" if isinstance(body, bytes) else "\n"
    return body.count(nl, 0, pos) + 1, pos - body.rfind(nl, 0, pos)  # type: ignore[arg-type]


def not_utf8(body: bytes) -> str:
    """The 400 message for a body FastAPI could not parse that is not a JSON syntax error:
    bytes that are not UTF-8 (JSON's encoding), said where, as a JSON error is."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as e:
        line, column = _line_column(body, e.start)
        return (
            f"the body is not valid UTF-8: byte 0x{body[e.start]:02x} at line {line}, column {column}; "
            "send the JSON encoded as UTF-8"
        )
    return "the body could not be read as JSON: send one JSON object encoded as UTF-8"


def _union_tag(part: str) -> bool:
    """A step of pydantic's error path that names a type of a union (`str`, `list[int]`), not a field."""
    return part in ("str", "int", "float", "bool") or "[" in part or part.startswith(("function-", "constrained-"))


def explain(errors: Sequence[Any], body: Any, content_type: str | None) -> tuple[str, str | None]:
    """The 400 message and `param` for a request body that failed validation."""
    first = errors[0] if errors else {}
    loc = [str(x) for x in first.get("loc", ()) if x != "body" and not _union_tag(str(x))]
    if first.get("type") == "json_invalid" and isinstance(body, str) and loc and loc[0].isdigit():
        pos = int(loc[0])
        line, column = _line_column(body, pos)
        why = str(first.get("ctx", {}).get("error", "not JSON"))
        return f"the body is not valid JSON: {why[:1].lower()}{why[1:]} at line {line}, column {column}", None
    media = (content_type or "").split(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        return "send the body as JSON, with the header 'Content-Type: application/json'", None
    if first.get("type") == "invalid_request":  # reject(): the message says it all
        where = f" (at {'.'.join(loc)})" if len(loc) > 1 else ""
        return first["ctx"]["message"] + where, first["ctx"]["param"] or (loc[0] if loc else None)
    if not loc:
        return "the body must be a JSON object of the request's fields", None
    return f"{first.get('msg', 'invalid request')} (at {'.'.join(loc)})", loc[0]
