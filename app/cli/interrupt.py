"""Ctrl+C in the terminal stops a command the way Stop does in the window: the first one sets
the command's cancel event (the engine stops within one prompt chunk or round and the command
ends with what it has, exit code 130); a second one quits at once.

Public API:
    stop_on_ctrl_c(cancel) -> context manager   (main thread only; elsewhere it does nothing)
    listen_for_ctrl_c()                          (at start: SIGINT is heard even if inherited ignored)
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def stop_on_ctrl_c(cancel: threading.Event) -> Iterator[threading.Event]:
    if threading.current_thread() is not threading.main_thread():
        yield cancel
        return

    def handler(signum: int, frame: object) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        print("\ndraftpair: stopping… (Ctrl+C again quits at once)", file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield cancel
    finally:
        signal.signal(signal.SIGINT, previous)


def listen_for_ctrl_c() -> None:
    """Hear Ctrl+C (SIGINT) even in a process started with it ignored. A program started as a
    background job of a script inherits SIGINT ignored, and so would the processes DraftPair
    starts and stops with it (its model-import worker, the server a soak runs): they could
    then never be stopped, nor clean up what they wrote. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
