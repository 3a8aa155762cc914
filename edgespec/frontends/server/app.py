"""`edgespec serve`: a local OpenAI-compatible endpoint over one Engine.

Routes: POST /v1/chat/completions and /v1/completions (streamed as server-sent
events in OpenAI's chunk format, ending with `data: [DONE]`, or not), GET
/v1/models, /health and /metrics (Prometheus text). Every response carries
`usage` (with `prompt_tokens_details.cached_tokens`: the prefix the engine
reused) and `speculation` (draft_n, draft_n_accepted, steps, acceptance, ...);
a stream carries them in its last chunk.

This module is the thin adapter: request fields -> `Engine.stream` options,
events -> OpenAI JSON. Turn-taking and disconnects live in queue.py;
Host/key/body checks, crashes and the error shape in guard.py. Requests carry
data only: no file paths, no templates, no model switching (`model` is
accepted and ignored; responses name the loaded pair).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from edgespec import (
    ContextFullError,
    EdgespecError,
    Engine,
    EngineCrashed,
    StreamEvent,
    ToolSet,
    check_structured_output,
    defaults,
)

from .fields import UNPARSABLE, ChatRequest, CompletionRequest, Sampling, explain, not_utf8
from .guard import Guard, allowed_host_names, check_bind, error_body
from .queue import ClientGone, GenerationQueue, Job, Metrics, QueueFull, ServerStopping
from .schema import COMPLETION_RESPONSES, ERRORS, ChatFormat, Format, TextFormat, sse_data

log = logging.getLogger("edgespec.server")
RETRY_AFTER_S = 2  # what /health suggests while the engine restarts

DEFAULTS: dict[str, Any] = dict(
    max_tokens=defaults.MAX_TOKENS,
    **defaults.SAMPLING,
    **defaults.PENALTIES,
    seed=None,
    k=None,
    speculative=True,
)


# -- the app -----------------------------------------------------------------------
def create_app(
    engine: Engine,
    *,
    api_key: str | None = None,
    host: str = defaults.HOST,
    port: int = defaults.PORT,
    cors_origin: str | None = None,
    max_queue: int = defaults.QUEUE,
    defaults: dict[str, Any] | None = None,
    allowed_hosts: tuple[str, ...] = (),
    body_timeout_s: float = defaults.BODY_TIMEOUT_S,
    max_tokens_cap: int = defaults.MAX_TOKENS_CAP,
) -> FastAPI:
    """The ASGI app. `defaults`: sampling options for fields a request leaves out
    (as `options.sampling_options` returns them). `max_tokens_cap`: the most tokens one
    request may generate, whatever it asks or the default says. `port` is informational."""
    check_bind(host, api_key)
    if max_queue < 0:
        raise EdgespecError(f"the queue bound must be >= 0 (got {max_queue})")
    options = {**DEFAULTS, **(defaults or {})}
    if max_tokens_cap < 1:
        raise EdgespecError(f"--max-tokens-cap must be >= 1 (got {max_tokens_cap})")
    metrics = Metrics()
    queue = GenerationQueue(engine, max_queue, metrics)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        queue.bind()
        yield
        queue.shutdown()

    app = FastAPI(
        title="edgespec",
        version="0.1.0",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        description=f"OpenAI-compatible endpoint over {engine.name} (port {port})",
    )
    app.state.queue = queue
    hosts = allowed_host_names(host, allowed_hosts)
    app.add_middleware(Guard, hosts=hosts, api_key=api_key, metrics=metrics, body_timeout_s=body_timeout_s)
    if cors_origin:  # outermost, so that preflights and error replies carry the CORS headers
        app.add_middleware(
            CORSMiddleware,
            allow_origins=[cors_origin],
            allow_methods=["GET", "POST"],
            allow_headers=["*"],  # OpenAI's JS SDK sends x-stainless-* headers with every call
        )
    _add_error_handlers(app)

    card = {"id": engine.name, "object": "model", "created": 0, "owned_by": "edgespec"}

    @app.get("/health", responses=ERRORS)
    async def health() -> Response:
        # "restarting": the engine's process died and a new one is loading the models
        state = "stopping" if queue.stopping else engine.state
        if state == "ok":
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": state}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})

    @app.get("/v1/models", responses=ERRORS)
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{model_id:path}", responses=ERRORS)
    async def model(model_id: str) -> Any:
        if model_id != engine.name:
            message = f"the model '{model_id}' is not served here; this server serves '{engine.name}'"
            body = error_body(404, message, param="model", code="model_not_found")
            return JSONResponse(body, status_code=404)
        return card

    for path, endpoint in (("/health", health), ("/v1/models", models), ("/v1/models/{model_id:path}", model)):
        app.add_api_route(path, endpoint, methods=["HEAD"], include_in_schema=False)  # uvicorn sends no body

    @app.get("/metrics", response_class=PlainTextResponse, responses=ERRORS)
    async def prometheus() -> str:
        return metrics.render(queue.waiting, queue.running)

    @app.post("/v1/chat/completions", responses=COMPLETION_RESPONSES)
    async def chat_completions(body: ChatRequest, request: Request) -> Response:
        messages = [m.for_template() for m in body.messages]
        tools = None
        if body.tools or body.tool_choice not in (None, "auto", "none"):  # an isolated engine's is a round trip:
            tools = await queue.prepare(  # off the event loop, so a stuck engine holds no other request
                lambda: engine.tools(body.tools, body.tool_choice, parallel=body.parallel_tool_calls is True)
            )
        if tools is not None and body.response_format and body.engine_json_schema() is not None:
            raise EdgespecError("tools cannot be combined with a JSON response_format; send one of them")
        fmt = ChatFormat(engine.name, engine.piece, tools)
        limit = min(body.max_completion_tokens or body.max_tokens or options["max_tokens"], max_tokens_cap)
        return await _complete(queue, request, body, fmt, messages, limit, options)

    @app.post("/v1/completions", responses=COMPLETION_RESPONSES)
    async def completions(body: CompletionRequest, request: Request) -> Response:
        prompt = body.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt = prompt[0]  # a batch of one
        limit = min(body.max_tokens or options["max_tokens"], max_tokens_cap)
        return await _complete(queue, request, body, TextFormat(engine.name, engine.piece), prompt, limit, options)

    return app


def _engine_options(body: Sampling, max_tokens: int | None, options: dict[str, Any], n_ctx: int) -> dict:
    opts = dict(options)
    for name in ("temperature", "top_k", "top_p", "min_p", "seed", "k", "speculative", "stop", *defaults.PENALTIES):
        value = getattr(body, name)
        if value is not None:
            opts[name] = value
    opts["logit_bias"] = body.engine_logit_bias()
    opts["logprobs"] = body.engine_logprobs()
    schema = getattr(body, "engine_json_schema", lambda: None)()
    if schema is not None:
        opts["json_schema"] = schema
    # past what the context holds, the engine stops at its end with finish_reason "length"
    opts["max_tokens"] = min(max_tokens or opts["max_tokens"], n_ctx)
    if opts["seed"] == -1:
        opts["seed"] = None  # llama.cpp's "random"
    elif opts["seed"] is not None:
        opts["seed"] %= 2**63  # any other JSON integer names one fixed random stream
    return opts


def _check_prompt_size(prompt: Any, n_ctx: int) -> None:
    """Refuse text that cannot fit before paying for tokenizing it (tokens rarely span
    more than a few characters; special-token text is slow to tokenize)."""
    if isinstance(prompt, str):
        chars = len(prompt)
    else:
        chars = sum(len(m["content"]) for m in prompt if isinstance(m, dict))
    limit = n_ctx * defaults.PROMPT_CHARS_PER_TOKEN
    if chars > limit:
        raise ContextFullError(
            f"the prompt is {chars} characters but the context holds {n_ctx} tokens, so prompts "
            f"are limited to {limit} characters; shorten it or start a new conversation"
        )


def _prompt_tokens(engine: Engine, prompt: Any, raw: bool, tools: ToolSet | None) -> list[int]:
    """The prompt's tokens, checked against the context (runs beside the generation in progress)."""
    tokens = engine.tokenize(prompt, raw=raw, tools=tools)
    if len(tokens) >= engine.n_ctx:
        raise ContextFullError(
            f"the prompt is {len(tokens)} tokens but the context holds {engine.n_ctx}; "
            "shorten it or start a new conversation"
        )
    return tokens


async def _complete(
    queue: GenerationQueue,
    request: Request,
    body: Sampling,
    fmt: Format,
    prompt: Any,
    max_tokens: int | None,
    options: dict[str, Any],
) -> Response:
    engine = queue.engine
    opts = _engine_options(body, max_tokens, options, engine.n_ctx)
    raw = isinstance(fmt, TextFormat)
    tools = fmt.tools if isinstance(fmt, ChatFormat) else None
    if tools is not None:
        opts["tools"] = tools
    # a schema that cannot be used is a 400 even on a full queue (compiling it is off the event loop)
    await queue.prepare(lambda: check_structured_output(json_schema=opts.get("json_schema"), tools=tools))
    queue.check_room()  # a 503 costs no tokenizing
    _check_prompt_size(prompt, engine.n_ctx)
    tokens = await queue.prepare(lambda: _prompt_tokens(engine, prompt, raw, tools))
    job = await queue.start(request.receive, lambda: engine.stream(tokens, **opts))
    try:  # errors that only the first step finds (a full context) are still a 400
        first = await job.next()
        if first.finish_reason == "cancelled" and queue.stopping and not first.tokens:
            raise ServerStopping()  # nothing was sent yet: a 503, not a stream that only says so
    except BaseException:
        job.close()
        raise
    if body.stream:
        usage_chunk = bool(body.stream_options and body.stream_options.include_usage)
        return _EventStream(job, _sse(job, first, fmt, usage_chunk))
    try:
        parts, event = [first.text], first
        lps = None if first.logprobs is None else list(first.logprobs)
        while event.finish_reason is None and not job.gone:
            event = await job.next()
            parts.append(event.text)
            if lps is not None and event.logprobs is not None:
                lps += event.logprobs
        if event.finish_reason == "cancelled" and queue.stopping:
            raise ServerStopping()
    finally:
        job.close()
    return JSONResponse(fmt.whole("".join(parts), event, lps))


class _EventStream(StreamingResponse):
    """An SSE response that ends its generation however the response ends."""

    def __init__(self, job: Job, chunks: AsyncIterator[str]) -> None:
        super().__init__(
            chunks,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self.job = job

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.job.close()


async def _sse(job: Job, event: StreamEvent, fmt: Format, usage_chunk: bool = False) -> AsyncIterator[str]:
    yield sse_data(fmt.chunk(None, None, first=True))
    while True:
        for chunk in fmt.chunks(event):
            yield sse_data(chunk)
        if event.finish_reason == "cancelled" and job.queue.stopping:
            yield sse_data(_error_chunk(fmt))
            yield sse_data(error_body(503, str(ServerStopping()), code="server_shutting_down"))
            break
        if event.finish_reason is not None:
            last = fmt.chunk(None, event)
            yield sse_data(last)
            if usage_chunk:  # OpenAI's stream_options.include_usage: one more chunk, no choices
                yield sse_data({**last, "choices": []})
            break
        if job.gone:
            return
        try:
            event = await job.next()
        except EdgespecError as err:  # headers are out: report in-band, as OpenAI does
            yield sse_data(_error_chunk(fmt))
            crashed = isinstance(err, EngineCrashed)
            yield sse_data(error_body(503 if crashed else 400, str(err), code="engine_crashed" if crashed else None))
            break
        except Exception:
            log.exception("generation failed")
            yield sse_data(_error_chunk(fmt))
            yield sse_data(error_body(500, "internal error while generating; see the server log"))
            break
    yield "data: [DONE]\n\n"


def _error_chunk(fmt: Format) -> dict[str, Any]:
    """The last chunk of a stream that an error ended: finish_reason "error"."""
    chunk = fmt.chunk(None, None)
    chunk["choices"][0]["finish_reason"] = "error"
    return chunk


def _param_of(message: str, code: str | None, prompt: str) -> str | None:
    """OpenAI's `param` for the engine's 400s: the prompt's field (`prompt`) for a context too
    small, else the request field the message begins with. Read from the message because an
    isolated engine's errors cross the process boundary as class and message only."""
    if code == "context_length_exceeded" or message.startswith("the prompt"):
        return prompt
    if message.startswith(("the JSON schema", "a JSON schema")):
        return "response_format"
    return next((f for f in ("tool_choice", "tools", "logit_bias") if message.startswith(f)), None)


def _add_error_handlers(app: FastAPI) -> None:
    def error(status: int, message: str, **kw: Any) -> JSONResponse:
        headers = kw.pop("headers", None)
        return JSONResponse(error_body(status, message, **kw), status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = explain(exc.errors(), exc.body, request.headers.get("content-type"))
        return error(400, message, param=param)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.detail == UNPARSABLE:  # FastAPI's words for a body json cannot decode
            return error(400, not_utf8(await request.body()))
        return error(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(EdgespecError)
    async def user_error(request: Request, exc: EdgespecError) -> JSONResponse:
        code = "context_length_exceeded" if isinstance(exc, ContextFullError) else None
        prompt = "messages" if request.url.path.endswith("/chat/completions") else "prompt"
        return error(400, str(exc), code=code, param=_param_of(str(exc), code, prompt))

    @app.exception_handler(EngineCrashed)
    async def crashed(_: Request, exc: EngineCrashed) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after)}
        return error(503, str(exc), code="engine_crashed", headers=headers)

    @app.exception_handler(QueueFull)
    async def busy(_: Request, exc: QueueFull) -> JSONResponse:
        return error(503, str(exc), code="queue_full", headers={"Retry-After": str(exc.retry_after)})

    @app.exception_handler(ServerStopping)
    async def stopping(_: Request, exc: ServerStopping) -> JSONResponse:
        return error(503, str(exc), code="server_shutting_down", headers={"Retry-After": str(exc.retry_after)})

    @app.exception_handler(ClientGone)
    async def gone(_: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)  # nobody reads it; the nginx convention for the log


from .running import serve_in_thread  # noqa: E402  (its home before running.py; embedders import it from here)

__all__ = ["create_app", "serve_in_thread"]
