"""What an engine knows about its models, as typed values for frontends.

`Engine.info()` returns an `EngineInfo`; the chat's model screen, `edgespec
inspect` and the bench read these fields instead of digging in nested dicts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class PairVerdict:
    """Whether a target and a draft can speculate together, and what to watch."""

    compatible: bool
    messages: tuple[str, ...] = ()  # why not, when not compatible
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"compatible": self.compatible, "messages": list(self.messages), "warnings": list(self.warnings)}


@dataclass(frozen=True)
class GpuOffload:
    supported: bool = False  # this llama.cpp build has a GPU backend
    target_layers: int = 0
    draft_layers: int = 0
    rpc: tuple[str, ...] = ()  # the rpc-servers holding the target's layers


@dataclass(frozen=True)
class LiveVerdict:
    """The measured verdict on a low-bit draft: `confirmed` when acceptance is low."""

    confirmed: bool
    message: str


@dataclass(frozen=True)
class EngineInfo:
    """Both models' facts (as `edgespec inspect` prints them), the pair verdict, GPU offload."""

    target: dict[str, Any] = field(default_factory=dict)
    draft: dict[str, Any] | None = None
    pair: PairVerdict | None = None
    gpu: GpuOffload = GpuOffload()
    n_ctx: int = 0
    threads: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
