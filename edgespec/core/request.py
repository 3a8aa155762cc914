"""What a decoder run is asked (`Request`) and what it yields each step (`Step`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .events import Stats, TokenLogprob
from .grammar import Grammar
from .plans import LOOKUP, MODEL, Controller
from .sampling import Draws, SamplingParams


@dataclass(frozen=True)
class Request:
    """One generation's settings: what `Decoder.run` needs besides the prompt."""

    params: SamplingParams
    controller: Controller
    max_tokens: int
    rng: Draws  # a seeded request's are keyed by position (coupling.Keyed): its answer is plain decoding's
    speculative: bool = True
    cancel: threading.Event | None = None
    lookup: bool = True  # draft from prompt lookup too, where the decoder has an index
    logprobs: int | None = None  # report the target's logprob of each token, and of this many alternatives
    grammar: Grammar | None = None  # structured output: a fresh matcher for this generation


@dataclass(frozen=True)
class Step:
    tokens: tuple[int, ...]
    from_draft: tuple[bool, ...]
    stats: Stats
    finish_reason: str | None = None
    k: int = 0  # the K the controller planned for this step (the step may draft fewer)
    source: str = MODEL  # where this step's drafts came from
    logprobs: tuple[TokenLogprob, ...] | None = None  # one per token, when the request asks
    lookup_from: int | None = None  # a model draft lookup finished: accepted drafts from here on are lookup's

    def sources(self) -> list[str]:
        """Where each token came from: "draft" (the model), "lookup" or "target"."""
        own = "lookup" if self.source == LOOKUP else "draft"
        split = len(self.tokens) if self.lookup_from is None else self.lookup_from
        return [("lookup" if i >= split else own) if f else "target" for i, f in enumerate(self.from_draft)]
