"""The chat's settings: sampling options (as `edgespec run`), what the UI shows, the
memory/CPU reader for the status bar, and SIGTERM's hook."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgespec import defaults

from .store import SavedChat

SysReader = Callable[[], "tuple[float | None, float | None]"]  # (rss bytes, cpu percent)


def psutil_reader() -> SysReader:
    """This process and its children (an isolated engine's models live in a child)."""
    import psutil

    me = psutil.Process()
    known: dict[int, psutil.Process] = {}

    def read() -> tuple[float | None, float | None]:
        nonlocal known  # cpu_percent measures since the last call on the same object
        known = {p.pid: known.get(p.pid, p) for p in [me, *me.children(recursive=True)]}
        rss = cpu = 0.0
        for p in known.values():
            try:
                rss += p.memory_info().rss
                cpu += p.cpu_percent(None)
            except psutil.Error:  # it ended between the listing and the reading
                pass
        return rss, cpu

    read()  # the first reading only starts the CPU measurement
    return read


_before: list[Any] = []  # the SIGTERM handler on_sigterm replaced (an embedding app's)


def on_sigterm(callback: Callable[[], None] | None) -> None:
    """Run `callback` on SIGTERM (`kill`, a session ending) in the running asyncio loop, or with
    None give back the handler there was; nothing where the loop cannot (not the main thread's,
    Windows)."""
    try:
        loop = asyncio.get_running_loop()
        if callback is None:
            if loop.remove_signal_handler(signal.SIGTERM) and _before and _before[0] is not None:
                signal.signal(signal.SIGTERM, _before.pop())  # (None: one set outside Python, now the default)
        else:
            before = signal.getsignal(signal.SIGTERM)
            loop.add_signal_handler(signal.SIGTERM, callback)
            _before[:] = [before]
    except (NotImplementedError, RuntimeError, ValueError):
        pass


@dataclass
class ChatOptions:
    """Sampling options (as `edgespec run`) plus what the UI shows."""

    max_tokens: int | None = None  # None: to the end of the answer (or of the context)
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
    chats_dir: Path | None = None  # where the conversation is saved as it goes (None: not saved)
    resume: SavedChat | None = None  # a saved chat to continue

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
