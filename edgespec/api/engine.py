"""The public API: load a target (and optional draft), then stream() or generate().

What the engine adds on top of the decoder: turning a prompt (a string, chat messages,
or token ids) into tokens with the model's chat template; turning token ids into text
with stop strings; one generation at a time (a lock), each with its own cancel flag
(`Generation`); the checks that run before any weights load (GGUF headers, tokenizer
compatibility, memory); and warnings a user should see (quantization asymmetry, no GPU).

`Engine(target, draft)` takes any objects that follow the `Model` / `TextModel` protocols
(edgespec.core.model): that is how tests and simulated machines run the real decoder.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core import defaults, templates
from ..core.controller import AdaptiveK, Controller, FixedK, StepTimes
from ..core.coupling import draws
from ..core.decoder import Decoder
from ..core.detok import TextAssembler
from ..core.errors import BusyError, EdgespecError
from ..core.events import Result, StreamEvent
from ..core.grammar import Grammar
from ..core.info import EngineInfo
from ..core.model import Model, TextModel
from ..core.penalties import make_penalties
from ..core.request import Request
from ..core.sampling import SamplingParams
from ..core.step_stats import drop
from ..core.tools import ToolSet
from ..llama.loading import LoadedPair, LoadOptions, load_pair, pair_files
from ..llama.pair import QuantReport
from ..llama.rpc import parse_endpoints
from .checks import CLOSED, Closed, busy, check_k, check_p_min, check_params, check_stop, check_structured_output
from .generation import Generation, close_running
from .live import LiveWarning
from .prompts import Prompt, Prompts
from .uses import Uses

log = logging.getLogger("edgespec")
LOCK_WAIT_S = 30.0
TEMPERATURES_KEPT = 8  # adaptive controllers kept, one per temperature (least recently used goes)


class Engine:
    """One target (and optionally one draft) model; one generation at a time."""

    def __init__(
        self,
        target: TextModel,
        draft: Model | None = None,
        *,
        name: str = "",
        warnings: Sequence[str] = (),
        info: EngineInfo | None = None,
        default_k: int | None = None,
        p_min: float = 0.0,
        quant_report: QuantReport | None = None,
        lookup: bool = True,
        heads: bool = True,
    ) -> None:
        self.target = target
        self.draft = draft
        self.lookup = lookup  # prompt lookup drafts (with or without a draft model)
        self.name = name
        self.warnings: list[str] = list(warnings)
        check_k(default_k)
        check_p_min(p_min)
        self.default_k = default_k
        self.p_min = p_min
        self._live = LiveWarning(quant_report)  # the quantization warning, as drafting measures it
        self._decoder = Decoder(target, draft, lookup=lookup, heads=heads)
        self.n_ctx = self._decoder.n_ctx
        self._info = info or EngineInfo(n_ctx=self.n_ctx)
        self._lock = threading.Lock()
        self._native = Uses()  # native reads outside a generation (tokenize, piece): close waits for them
        self._running: Generation | None = None
        self._owner: int | None = None  # the thread that took the lock (for BusyError's words)
        self._closed = self._closing = False
        # what the adaptive controller measured carries over to the next request instead of
        # being learned again every time: step costs are the machine's (one table for all),
        # acceptance depends on the temperature (one controller each, the most recent few kept)
        self._step_times = StepTimes()
        self._adaptive: OrderedDict[float, AdaptiveK] = OrderedDict()
        # llama.cpp prints a template of another type as text ("5"): the header's own type decides
        template = target.chat_template() if (info is None or info.target.get("chat_template", True)) else None
        if template is None:
            self.warnings.append("the target has no chat template; using a plain ChatML layout (or pass --raw)")
        self._prompts = Prompts(target, template or templates.FALLBACK_TEMPLATE)
        for w in self.warnings:
            log.warning("%s", w)

    # -- construction --------------------------------------------------------------
    @classmethod
    def load(
        cls,
        target: str | Path,
        draft: str | Path | None = None,
        *,
        n_ctx: int = defaults.N_CTX,
        n_gpu_layers: int = 0,
        draft_n_gpu_layers: int | None = None,
        threads: int | None = None,
        k: int | None = None,
        p_min: float = 0.0,
        name: str | None = None,
        lookup: bool = True,
        isolated: bool = False,
        rpc: str | Sequence[str] = (),
        heads: bool = True,
    ) -> Engine:
        """Check both GGUF files, then load them. `k`: fixed draft length (None: adaptive).
        `draft=None` speculates with prompt lookup alone; `lookup=False` turns lookup off.
        `isolated=True`: the models run in a child process that restarts after a crash.
        `rpc="host:port,..."`: the target's layers go there. `heads=False`: whole rows from a GPU."""
        rpc = parse_endpoints(rpc) if rpc or isinstance(rpc, str) else ()  # "" names no server: said
        options = LoadOptions(n_ctx, n_gpu_layers, draft_n_gpu_layers, threads, k, p_min, name, lookup, rpc, heads)
        if isolated:
            return _isolated(target, draft, options)
        return cls._from_loaded(load_pair(target, draft, options))

    @classmethod
    def from_pair(
        cls,
        name: str,
        config: str | Path | None = None,
        *,
        with_draft: bool = True,
        isolated: bool = False,
        **overrides: Any,
    ) -> Engine:
        """A pair from models.toml (prepared on first use, in this process). `overrides`:
        `Engine.load`'s keywords; None keeps the pair's own setting. `progress`: a callback for
        preparation. `with_draft=False` loads the target alone (lookup drafts unless `lookup=False`)."""
        target, draft, options = pair_files(name, config, **overrides)
        if isolated:
            return _isolated(target, draft if with_draft else None, options)
        return cls._from_loaded(load_pair(target, draft if with_draft else None, options))

    @classmethod
    def _from_loaded(cls, p: LoadedPair) -> Engine:
        return cls(
            p.target,
            p.draft,
            name=p.name,
            warnings=p.warnings,
            info=p.info,
            default_k=p.options.k,
            p_min=p.options.p_min,
            quant_report=p.quant,
            lookup=p.options.lookup,
            heads=p.options.heads,
        )

    def close(self) -> None:
        """Free the models once a generation still running ends (closed, or cancelled where another thread reads)."""
        if self._closed:
            return
        self._closing = True  # from now a stream waiting for the engine gets CLOSED, not a turn
        close_running(self._running, LOCK_WAIT_S, undo=lambda: setattr(self, "_closing", False))
        with self._hold(closing=True), self._native.alone():  # and no tokenize or piece under way elsewhere
            if not self._closed:  # (a close beside this one)
                for m in (self.draft, self.target):
                    getattr(m, "close", lambda: None)()
                self.target = self._prompts = Closed()  # type: ignore[assignment]  # not freed memory: an error
            self._closed = True

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- facts -----------------------------------------------------------------------
    def info(self) -> EngineInfo:
        """Both models' facts, the pair verdict and GPU offload, for inspect screens."""
        return self._info

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    @property
    def state(self) -> str:
        """ "ok" or "closed" (an isolated engine also says "restarting" or "failed")."""
        return "closed" if self._closed else "ok"

    @property
    def has_draft(self) -> bool:
        return self.draft is not None

    @property
    def can_speculate(self) -> bool:
        """A draft model, prompt lookup, or both."""
        return self.draft is not None or self.lookup

    def tokenize(self, prompt: Prompt, *, raw: bool = False, tools: ToolSet | None = None) -> list[int]:
        """A string (a user message, or with `raw` text as is), messages or token ids as tokens."""
        with self._native():
            return self._prompts.tokenize(prompt, raw=raw, tools=tools)

    def chat_text(self, messages: Sequence[dict], *, tools: ToolSet | None = None) -> str:
        """The prompt text the chat template makes of `messages` (what gets tokenized)."""
        with self._native():
            return self._prompts.chat_text(messages, tools=tools)

    def tools(self, tools: Any, tool_choice: Any = "auto", *, parallel: bool = False) -> ToolSet | None:
        """A checked `ToolSet` for `stream(tools=...)` from OpenAI's `tools` and `tool_choice`
        ("auto", "none", "required" or {"type": "function", "function": {"name": ...}});
        None when no tool may be called. `parallel=True`: several calls in one answer."""
        with self._native():
            return self._prompts.tools(tools, tool_choice, parallel=parallel)

    def piece(self, token: int) -> bytes:
        """The bytes one token stands for."""
        with self._native():
            return self._prompts.piece(token)

    def reset(self) -> None:
        """Empty both KV caches (the next request prefills from scratch, as in a fresh process)."""
        with self._hold():
            self._decoder.reset()

    # -- generation ------------------------------------------------------------------
    def cancel(self) -> None:
        """Stop the running generation at the end of its current step (thread-safe)."""
        with contextlib.suppress(ReferenceError):  # a handle dropped as this runs: its events end anyway
            if (running := self._running) is not None:
                running.cancel()

    def stream(
        self,
        prompt: Prompt,
        *,
        max_tokens: int = defaults.MAX_TOKENS,
        temperature: float = defaults.TEMPERATURE,
        top_k: int = defaults.TOP_K,
        top_p: float = defaults.TOP_P,
        min_p: float = defaults.MIN_P,
        seed: int | None = None,
        speculative: bool = True,
        k: int | None = None,
        stop: Sequence[str] | str | None = None,
        raw: bool = False,
        presence_penalty: float = defaults.PRESENCE_PENALTY,
        frequency_penalty: float = defaults.FREQUENCY_PENALTY,
        repeat_penalty: float = defaults.REPEAT_PENALTY,
        repeat_last_n: int = defaults.REPEAT_LAST_N,
        logit_bias: Mapping[int, float] | None = None,
        logprobs: int | None = None,
        json_schema: Any = None,
        grammar: str | None = None,
        tools: ToolSet | list | None = None,
    ) -> Generation:
        """Start a generation; iterate the returned handle for events, `cancel()` it to stop.
        `logprobs=N`: each event carries the target's log probability of its tokens and of
        the N most likely alternatives (0..20; None: none, and no cost). `json_schema` (a
        dict or JSON text; True: any JSON object) or `grammar` (Lark) constrains the output.
        `tools` (from `Engine.tools`, or OpenAI's list) offers functions: `tools.parser()` reads the calls."""
        stops = check_stop(stop)
        with self._native():  # what reads the models here finishes before a close frees them
            tools = self.tools(tools) if isinstance(tools, list) else tools  # OpenAI's list as it is
            compiled = check_structured_output(json_schema, grammar, tools)
            pen = make_penalties(
                presence_penalty, frequency_penalty, repeat_penalty, repeat_last_n, logit_bias, self.target.n_vocab
            )
            params = SamplingParams(temperature, top_k, top_p, min_p, seed, pen)
            check_params(params, max_tokens, k, logprobs)
            tokens = self.tokenize(prompt, raw=raw, tools=tools)
            matcher = self._grammar(compiled) if compiled is not None else None
        spec = speculative and self.can_speculate and (self.default_k if k is None else k) != 0  # K = 0: plain
        return Generation(lambda gen: self._run(gen, tokens, params, max_tokens, spec, k, stops, logprobs, matcher))

    def _grammar(self, compiled: str) -> Grammar:
        tokenizer = getattr(self.target, "grammar_tokenizer", None)
        if tokenizer is None:
            raise EdgespecError("this model backend has no tokenizer for structured output")
        return Grammar(tokenizer(), compiled, self.target.n_vocab)

    def _run(
        self,
        gen: Generation,
        tokens: list[int],
        params: SamplingParams,
        max_tokens: int,
        speculative: bool,
        k: int | None,
        stops: list[str],
        logprobs: int | None,
        grammar: Grammar | None = None,
    ) -> Iterator[StreamEvent]:
        with self._hold():
            self._running = gen
            request = Request(
                params=params,
                controller=self._controller(k, params.temperature, max_tokens),
                max_tokens=max_tokens,
                rng=draws(params.seed),
                speculative=speculative,
                cancel=gen.cancelled,
                logprobs=logprobs,
                grammar=grammar,
            )
            text = TextAssembler(self.target.piece, stops)
            steps = self._decoder.run(tokens, request)
            stats = None
            final: StreamEvent | None = None
            try:
                for step in steps:
                    stats = step.stats
                    segments, stop_at = text.feed(step.tokens, step.sources())
                    toks, flags, finish, lps = step.tokens, step.from_draft, step.finish_reason, step.logprobs
                    if stop_at is not None:
                        toks, flags, finish = toks[: stop_at + 1], flags[: stop_at + 1], "stop"
                        lps = lps[: stop_at + 1] if lps is not None else None
                        drop(step.stats, step.sources(), len(toks))  # the answer ends here, and its counts
                    elif finish is not None:
                        segments += text.finish()
                    if logprobs is not None and lps is None:
                        lps = ()  # the last event, with no tokens
                    piece = "".join(s.text for s in segments)
                    event = StreamEvent(piece, toks, flags, step.stats, finish, tuple(segments), step.k, lps)
                    if finish is not None:
                        final = event
                        break
                    yield event
            finally:
                steps.close()
                self._running = None
                self.warnings = self._live.update(stats, self.warnings)
        if final is not None:  # the last event, with the engine released: a reader that stops at it holds nothing
            yield final

    def _controller(self, k: int | None, temperature: float, max_tokens: int) -> Controller:
        k = k if k is not None else self.default_k
        model = self.draft is not None
        if k is not None:
            return FixedK(k, self.p_min, model=model)
        key = round(temperature, 2)
        ctrl = self._adaptive.pop(key, None) or AdaptiveK(times=self._step_times, model=model)
        ctrl.p_min = self.p_min
        ctrl.begin(max_tokens)
        self._adaptive[key] = ctrl  # most recently used last
        while len(self._adaptive) > TEMPERATURES_KEPT:
            self._adaptive.popitem(last=False)
        return ctrl

    @contextlib.contextmanager
    def _hold(self, closing: bool = False) -> Iterator[None]:
        """The engine lock, waited for a bounded time: a stream left unfinished holds it (and where the
        same thread left it, waiting can only end when another thread reads that stream on). Once a close
        waits for it, a stream waiting too gets CLOSED, not a turn first (a close then lost to it)."""
        self._closing |= closing
        if not self._lock.acquire(timeout=LOCK_WAIT_S):
            self._closing &= not closing  # a close that failed leaves the engine as it was
            raise BusyError(busy(LOCK_WAIT_S, own=self._owner == threading.get_ident()))
        self._owner = threading.get_ident()
        try:
            if not closing and (self._closed or self._closing):
                raise EdgespecError(CLOSED)
            yield
        finally:
            self._owner = None
            self._lock.release()

    def generate(self, prompt: Prompt, **options: Any) -> Result:
        """Run a whole generation (`stream`'s options) and return its text, tokens and stats
        (with `tools`: the calls in `tool_calls`, the rest of the answer in `text`)."""
        if isinstance(options.get("tools"), list):  # OpenAI's list as it is
            options["tools"] = self.tools(options["tools"])
        parts: list[str] = []
        tokens: list[int] = []
        event = None
        with self.stream(prompt, **options) as gen:
            for event in gen:
                parts.append(event.text)
                tokens.extend(event.tokens)
        assert event is not None and event.finish_reason is not None  # closed elsewhere: "cancelled" (Generation)
        text, finish, calls = "".join(parts), event.finish_reason, []
        if options.get("tools") is not None:
            content, finish, calls = options["tools"].answer(text, finish)
            text = content or ""
        return Result(text, tokens, finish, event.stats, list(self.warnings), calls)


# Set by edgespec.api.isolated, which the package always imports: it subclasses Engine, so
# importing it from here would make a loop.
_isolate: Callable[[str | Path, str | Path | None, LoadOptions], Engine] | None = None


def _isolated(target: str | Path, draft: str | Path | None, options: LoadOptions) -> Engine:
    assert _isolate is not None, "edgespec.api.isolated registers itself on import"
    return _isolate(target, draft, options)
