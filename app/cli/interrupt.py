"""Ctrl+C in the terminal stops a command the way Stop does in the window: the first one sets
the command's cancel event (the engine stops within one prompt chunk or round and the command
ends with what it has, exit code 130); a second one quits at once.

Public API:
    stop_on_ctrl_c(cancel) -> context manager   (main thread only; elsewhere it does nothing)
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
