"""The chat's settings: sampling options (as `edgespec run`), what the UI shows, and the
memory/CPU reader for the status bar."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgespec import defaults

SysReader = Callable[[], "tuple[float | None, float | None]"]  # (rss bytes, cpu percent)


def psutil_reader() -> SysReader:
    import psutil

    proc = psutil.Process()
    proc.cpu_percent(None)  # the first call only starts the measurement

    def read() -> tuple[float | None, float | None]:
        return float(proc.memory_info().rss), proc.cpu_percent(None)

    return read


@dataclass
class ChatOptions:
    """Sampling options (as `edgespec run`) plus what the UI shows."""

    max_tokens: int = defaults.MAX_TOKENS
    temperature: float = defaults.TEMPERATURE
    top_k: int = defaults.TOP_K
    top_p: float = defaults.TOP_P
    min_p: float = defaults.MIN_P
    seed: int | None = None
    k: int | None = None
    speculative: bool = True
    presence_penalty: float = defaults.PRESENCE_PENALTY
    frequency_penalty: float = defaults.FREQUENCY_PENALTY
    repeat_penalty: float = defaults.REPEAT_PENALTY
    repeat_last_n: int = defaults.REPEAT_LAST_N
    highlight: bool = True
    timings: bool = True  # False: no wall-clock numbers on screen (deterministic snapshots)
    sys_reader: SysReader | None = None  # None: psutil on this process
    refresh_s: float = 1.0  # how often memory/CPU are read
    save_dir: Path = field(default_factory=Path.cwd)

    @classmethod
    def from_args(cls, args: Any) -> ChatOptions:
        from edgespec.frontends.options import sampling_options

        return cls(**sampling_options(args))

    def sampling(self) -> dict[str, Any]:
        return dict(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            seed=self.seed,
            k=self.k,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            repeat_penalty=self.repeat_penalty,
            repeat_last_n=self.repeat_last_n,
        )
