"""User-facing errors.

Every error a user can cause is an `EdgespecError` whose message is one line
that says what happened and what to do next. Frontends print `str(err)` as is
(the CLI exits with code 2); anything else escaping is a bug.
"""

from __future__ import annotations

import numbers


class EdgespecError(Exception):
    """Base class: the message is shown to the user verbatim."""


class ModelFileError(EdgespecError):
    """A model path is missing, not a file, not GGUF, truncated or malformed."""


class PairError(EdgespecError):
    """Target and draft cannot be used together (e.g. different vocabularies)."""


class MemoryPreflightError(EdgespecError):
    """The models and caches would not fit in available memory."""


class ContextFullError(EdgespecError):
    """The prompt does not fit in the context window."""


class ConfigError(EdgespecError):
    """models.toml (or a pair/model name) is wrong; the message names the key."""


class BackendError(EdgespecError):
    """llama.cpp refused an operation (decode failed, cache cannot be cut)."""


class BusyError(EdgespecError):
    """A generation is already running on this engine."""


class EngineCrashed(EdgespecError):
    """The engine's process died (or is restarting after it did); `retry_after`: seconds
    until it is likely back."""

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def require_number(name: str, value: object) -> None:
    """An option that takes a number: a bool, a string or None is the caller's mistake, said
    here instead of as a TypeError from deep inside a generation."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise EdgespecError(f"{name} must be a number (got {value!r})")


def require_integer(name: str, value: object) -> None:
    """As `require_number`, for an option that takes a whole number (2.5 is not one)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise EdgespecError(f"{name} must be an integer (got {value!r})")
