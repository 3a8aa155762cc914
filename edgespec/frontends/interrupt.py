"""A second Ctrl-C that quits while native code holds the main thread.

Python raises KeyboardInterrupt only when the main thread is back in Python. A llama.cpp
call waiting on an RPC server that froze (a host suspended, a cable pulled: no reset ever
comes) never returns, so `edgespec run` went on waiting whatever the user pressed. The C
signal handler still writes each signal to `signal.set_wakeup_fd`'s pipe, from any
thread: a watcher reads it there. A first Ctrl-C is left to Python as before (the answer
so far stays, "edgespec: interrupted"); if it has not ended the command within
`NOTICE_S`, the watcher says so, and a second one ends the process at once with 130.

Not for commands with an event loop of their own (serve, chat): asyncio takes the wakeup
fd for its signal handlers.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

NOTICE_S = 2.0  # a first Ctrl-C not honoured this long is said to be waiting on native code


def quit_on_second_interrupt() -> bool:
    """Start the watcher (the main thread only, once); whether it runs."""
    if threading.current_thread() is not threading.main_thread():
        return False
    read, write = os.pipe()
    os.set_blocking(write, False)  # the C handler must never block on a full pipe
    try:
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:  # not the main thread of the main interpreter
        os.close(read)
        os.close(write)
        return False
    threading.Thread(target=_watch, args=(read,), name="edgespec-interrupt", daemon=True).start()
    return True


def _watch(read: int) -> None:
    pressed = 0
    notice: threading.Timer | None = None
    while data := os.read(read, 64):
        for signum in data:
            if signum != signal.SIGINT:
                continue
            pressed += 1
            if pressed == 1:
                notice = threading.Timer(NOTICE_S, _say, ("still waiting for llama.cpp; press Ctrl-C again to quit",))
                notice.daemon = True
                notice.start()
            else:
                _say("interrupted while llama.cpp was still running (an RPC server that stopped answering?)")
                os._exit(130)


def _say(line: str) -> None:
    try:
        sys.stderr.write(f"\nedgespec: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed under us: the exit code still tells
        pass
