"""llama.cpp's log, into Python's logging: every line at DEBUG (`--verbose` shows them; a load's
warnings are chatty), and the first error line since a load began kept as the reason our own
one-line error gives.

A Ctrl-C that arrives while llama.cpp is inside a call that logs (a model load prints hundreds
of lines) is raised inside this callback, and ctypes drops what a callback raises: the load went
on and the whole answer was generated. Catching it in the callback missed it about half the
time (raised at the callback's first line, before its `try`), so from `begin_load` to
`raise_if_interrupted` Ctrl-C only sets a flag (in the main thread, where Python runs signal
handlers), and `raise_if_interrupted` raises it once the native call has returned.

The callback's type is llama_cpp's own `llama_log_callback` (ctypes caches one class per
signature), so this module needs no import of llama_cpp.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
from typing import Any

log = logging.getLogger("edgespec.llama")
LEVELS = {0: logging.CRITICAL, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
CONTINUED = 5  # ggml's level for a line that goes on the previous one
_last_level = logging.DEBUG
_first_error = ""
_interrupted = threading.Event()
_previous: Any = None  # SIGINT's handler before begin_load, while a native call runs


@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    global _last_level, _first_error
    try:
        _last_level = lvl = _last_level if level == CONTINUED else LEVELS.get(level, logging.DEBUG)
        msg = text.decode("utf-8", "replace").rstrip("\n")
        if msg:
            _first_error = _first_error or (msg.strip() if lvl >= logging.ERROR else "")
            log.debug("%s", msg)
    except KeyboardInterrupt:
        _interrupted.set()


def quiet_aborts() -> None:
    """ggml prints a backtrace before it aborts by running gdb on the process (about 100 lines,
    on stdout too, over a chat's screen); the abort's own line says what went wrong. Off unless
    EDGESPEC_NATIVE_BACKTRACE=1 (or GGML_NO_BACKTRACE is set already). ggml reads it when it
    aborts; set in the environment, the isolated engine's process inherits it."""
    if os.environ.get("EDGESPEC_NATIVE_BACKTRACE") != "1":
        os.environ.setdefault("GGML_NO_BACKTRACE", "1")


def begin_load() -> None:
    """Before a native call that logs; `raise_if_interrupted` after it, on every path."""
    global _first_error, _previous
    _first_error = ""
    _interrupted.clear()  # (one kept from a call that nobody checked is not this load's)
    if threading.current_thread() is threading.main_thread() and _previous is None:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not a child's SIG_IGN
            _previous = signal.signal(signal.SIGINT, lambda *_: _interrupted.set())


def first_error() -> str:
    """The first error line llama.cpp logged since `begin_load` ("" if none)."""
    return _first_error


def raise_if_interrupted() -> None:
    """Raise the KeyboardInterrupt kept during the native call, if one came."""
    global _previous
    if _previous is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _previous)
        _previous = None
    if _interrupted.is_set():
        _interrupted.clear()
        raise KeyboardInterrupt
