"""A ``draftpair serve`` process on 127.0.0.1, watched from outside (the hostile soak, tests).

A separate process, so a request that kills the server shows as what it is: an exit status
(139 for a segfault), not a dead test. Its stderr goes to a file, read back for the log lines.

    with ServerProcess(["--model", "demo", "--no-draft"], log_path) as srv:
        srv.url          # http://127.0.0.1:PORT
        srv.alive()      # still running?
        srv.rss()        # resident memory in bytes
        srv.log()        # what it printed so far
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

_URL = re.compile(r" at (http://127\.0\.0\.1:\d+)/v1")


class ServerProcess:
    def __init__(self, args: list[str], log_path: str | Path, *, start_timeout_s: float = 300.0,
                 env: dict[str, str] | None = None, preexec_fn=None):
        self.args = list(args)
        self.log_path = Path(log_path)
        self.start_timeout_s = start_timeout_s
        self.env = env
        self.preexec_fn = preexec_fn
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> str:
        """Start it on a free port (``--port 0``) and wait for its URL; raises RuntimeError
        with its log if it exits or stays silent."""
        cmd = [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", "0",
               *self.args]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log,
                                         stdin=subprocess.DEVNULL, env=self.env,
                                         preexec_fn=self.preexec_fn)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            m = _URL.search(self.log())
            if m:
                self.url = m.group(1)
                return self.url
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"draftpair serve did not start:\n{self.log()[-2000:]}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss(self) -> int:
        """Resident memory of the server in bytes (0 once it has ended)."""
        try:
            import psutil

            return int(psutil.Process(self.pid).memory_info().rss)
        except Exception:  # noqa: BLE001 - gone, or not readable
            return 0

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """Ctrl+C, then kill if it does not end; returns its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGINT)
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def limit_open_files(soft: int, hard: int | None = None):
    """A ``preexec_fn`` giving the child process an open-files limit (``hard`` defaults to
    ``soft``), as on a machine whose limit is low."""

    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard or soft))

    return apply


def crashed(code: int | None) -> bool:
    """An exit status that means the server died (a signal, or an error exit) rather than
    ending on Ctrl+C (130) or normally (0)."""
    return code is not None and code not in (0, 130, -signal.SIGINT)

