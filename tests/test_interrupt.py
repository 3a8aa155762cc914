"""A second Ctrl-C ends `edgespec run` while native code holds the main thread (a llama.cpp
call waiting on an RPC server that froze never returned, and Ctrl-C did nothing)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

STUCK = """
import signal, sys, time
from edgespec.frontends.interrupt import quit_on_second_interrupt
with quit_on_second_interrupt() as watching:
    assert watching
    # the main thread as a native call holds it: signals reach the watcher's thread, never Python's loop
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    print("ready", flush=True)
    time.sleep(30)
print("slept", flush=True)
"""


def _stuck() -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", STUCK], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signals")
def test_a_second_ctrl_c_ends_a_process_stuck_in_native_code() -> None:
    proc = _stuck()
    proc.send_signal(signal.SIGINT)
    time.sleep(2.5)  # past NOTICE_S: the watcher says what it waits for
    assert proc.poll() is None
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 130 and time.monotonic() - t0 < 5
    assert "press Ctrl-C again to quit" in err and "interrupted while llama.cpp was still running" in err


def test_one_ctrl_c_is_left_to_python() -> None:
    script = STUCK.replace("signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})", "")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=10)
    assert "KeyboardInterrupt" in err and "press Ctrl-C again" not in err  # Python's own, at once


def test_after_the_command_ctrl_c_is_pythons_alone() -> None:
    # a test runner ran `edgespec run` in its own process, then sent its own Ctrl-Cs: the watcher
    # left from that run ended the whole runner with 130
    from edgespec.frontends.interrupt import quit_on_second_interrupt

    before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before)
    with quit_on_second_interrupt() as watching:
        assert watching
    assert signal.set_wakeup_fd(before) == before  # the wakeup fd is the one before
    for _ in range(2):
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.5)
    time.sleep(0.3)  # (a watcher still reading would have ended this process by now)
