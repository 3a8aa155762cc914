"""The checks `Engine.stream` runs on a request's options before anything is queued: each
failure is one EdgespecError line that names the option and its range."""

from __future__ import annotations

from ..core import defaults
from ..core.errors import EdgespecError
from ..core.sampling import SamplingParams


def check_params(p: SamplingParams, max_tokens: int, k: int | None) -> None:
    if not p.temperature >= 0:
        raise EdgespecError(f"temperature must be >= 0 (got {p.temperature})")
    if not 0 < p.top_p <= 1:
        raise EdgespecError(f"top_p must be in (0, 1] (got {p.top_p})")
    if not 0 <= p.min_p <= 1:
        raise EdgespecError(f"min_p must be in [0, 1] (got {p.min_p})")
    if max_tokens < 1:
        raise EdgespecError(f"max_tokens must be >= 1 (got {max_tokens})")
    check_k(k)
    if p.seed is not None and not 0 <= p.seed < 2**63:
        raise EdgespecError(f"seed must be a non-negative integer (got {p.seed})")


def check_k(k: int | None) -> None:
    if k is not None and not 0 <= k <= defaults.K_LIMIT:
        raise EdgespecError(f"k must be between 0 and {defaults.K_LIMIT} (got {k})")
