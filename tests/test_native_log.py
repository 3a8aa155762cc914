"""llama.cpp's log callback: a Ctrl-C that lands in it is kept for the caller (ctypes drops what a
callback raises, and `edgespec run` went on to load and answer), and ggml's abort backtrace is off."""

from __future__ import annotations

import ctypes

import pytest

from edgespec.llama import native_log


def test_a_ctrl_c_inside_the_callback_is_raised_once_the_native_call_returns(monkeypatch) -> None:
    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    native_log.begin_load()
    monkeypatch.setattr(native_log.log, "debug", interrupted)
    native_log.log_callback(4, b"llama_model_load: loading tensors\n", None)  # through ctypes, as llama.cpp calls it
    with pytest.raises(KeyboardInterrupt):
        native_log.raise_if_interrupted()
    native_log.raise_if_interrupted()  # once only
    native_log.log_callback(4, b"x\n", None)
    native_log.begin_load()  # kept from a call nobody checked: not the next load's
    native_log.raise_if_interrupted()


def test_a_ctrl_c_anywhere_in_a_native_call_is_kept_and_sigint_handled_as_before_after_it() -> None:
    # raised at the callback's first line, before its `try`, the Ctrl-C was dropped by ctypes
    # about half the time (the load and the whole answer went on, exit code 0)
    import os
    import signal
    import time

    before = signal.getsignal(signal.SIGINT)
    native_log.begin_load()
    os.kill(os.getpid(), signal.SIGINT)  # Python runs the handler here: it only keeps it
    native_log.log_callback(4, b"llama_model_load: loading tensors\n", None)
    with pytest.raises(KeyboardInterrupt):
        native_log.raise_if_interrupted()
    assert signal.getsignal(signal.SIGINT) is before is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)  # outside a native call: raised at once, as ever
        time.sleep(1)


def test_the_first_error_line_of_a_load_is_kept() -> None:
    native_log.begin_load()
    native_log.log_callback(3, b"a warning\n", None)
    native_log.log_callback(4, b"llama_model_load: error loading model: bad tensor\n", None)
    native_log.log_callback(4, b"a later error\n", None)
    assert native_log.first_error() == "llama_model_load: error loading model: bad tensor"


def test_ggmls_gdb_backtrace_before_an_abort_is_off_where_native_code_reads_it(monkeypatch) -> None:
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    monkeypatch.delenv("GGML_NO_BACKTRACE", raising=False)
    monkeypatch.setenv("EDGESPEC_NATIVE_BACKTRACE", "0")
    native_log.quiet_aborts()
    assert libc.getenv(b"GGML_NO_BACKTRACE") == b"1"  # what ggml_print_backtrace reads (C's environment)
    monkeypatch.delenv("GGML_NO_BACKTRACE")
    monkeypatch.setenv("EDGESPEC_NATIVE_BACKTRACE", "1")
    native_log.quiet_aborts()
    assert libc.getenv(b"GGML_NO_BACKTRACE") is None


def test_a_model_path_that_is_not_utf8_leaves_sigint_as_it_was() -> None:
    # encoding the path raised between begin_load and raise_if_interrupted, and Ctrl-C was
    # only a flag from then on; the path is now bytes before the flag is set, and such a name loads
    import signal

    from edgespec.core.errors import ModelFileError
    from edgespec.llama import backend

    with pytest.raises(ModelFileError, match="could not load"):
        backend.LlamaModel("/nonexistent/no\udcffsuch.gguf")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler and native_log._previous is None
