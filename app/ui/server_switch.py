"""The app's Server switch: ``draftpair serve`` on the loaded pair, as a child process.

The server has its own engine (its own copy of the weights) so HTTP requests never wait
behind, or slow down, the app's own replies; the cost is the memory of a second load, which
the menu says. The URL appears once the child announces it; a child that ends by itself
reports its last line as a plain message.
"""

from __future__ import annotations

import re
import sys

from PySide6.QtCore import QObject, QProcess, Signal

_URL = re.compile(r"at (http://\S+?)/v1")


class ServerSwitch(QObject):
    url_changed = Signal(str)  # the base URL when serving, "" when stopped
    failed = Signal(str)  # plain message

    def __init__(self, parent: QObject | None = None, *, port: int = 8080):
        super().__init__(parent)
        self.port = port
        self.url = ""
        self._proc: QProcess | None = None
        self._last_line = ""
        self._stopping = False

    @property
    def running(self) -> bool:
        return self._proc is not None

    def start(self, target: str, draft: str) -> None:
        if self._proc is not None:
            return
        args = ["serve", "--model", target, "--port", str(self.port)]
        args += ["--draft", draft] if draft else ["--no-draft"]
        if not getattr(sys, "frozen", False):  # the frozen app is itself the CLI
            args = ["-m", "app", *args]
        proc = QProcess(self)
        proc.setProcessChannelMode(QProcess.ProcessChannelMode.SeparateChannels)
        proc.readyReadStandardError.connect(self._read)
        proc.finished.connect(self._finished)
        self._proc = proc
        self._stopping = False
        self._last_line = ""
        proc.start(sys.executable, args)

    def stop(self, timeout_ms: int = 10_000) -> None:
        proc = self._proc
        if proc is None:
            return
        self._stopping = True
        proc.terminate()
        if not proc.waitForFinished(timeout_ms):
            proc.kill()
            proc.waitForFinished(2000)

    def _read(self) -> None:
        assert self._proc is not None
        text = bytes(self._proc.readAllStandardError().data()).decode("utf-8", "replace")
        for line in text.splitlines():
            line = line.strip()
            if line:
                self._last_line = line
            m = _URL.search(line)
            if m and not self.url:
                self.url = m.group(1)
                self.url_changed.emit(self.url)

    def _finished(self, *_args: object) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.deleteLater()
        if not self._stopping:
            reason = self._last_line.removeprefix("draftpair: error: ")
            self.failed.emit(f"The server stopped: {reason or 'it exited'}")
        if self.url:
            self.url = ""
            self.url_changed.emit("")
