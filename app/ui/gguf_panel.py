"""Models found on this computer (LM Studio, Ollama, llama.cpp, HF cache) and GGUF import.

``FoundModelsPanel`` lists what ``app.checkpoints.discovery`` finds (headers only, on the
view's background pool) and imports a GGUF -- picked from that list, chosen with a file dialog
or dropped onto the panel -- by running ``draftpair models import --json`` as a child process.
The conversion is MLX work and can need gigabytes; a separate process keeps it off the engine
worker, frees its memory when done, and can be cancelled (SIGINT: it removes what it wrote).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from PySide6.QtCore import QProcess, QProcessEnvironment, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.ui.background import Background
from app.ui.format import format_bytes

COLUMNS = ("Model", "Found in", "Architecture", "Quant", "Size", "Status")
ROLE_FOUND = Qt.ItemDataRole.UserRole
_PENDING = object()  # an import plan being worked out


def import_command(ref: str, name: str | None = None) -> list[str]:
    """argv for ``draftpair models import REF --json`` in this installation (frozen or not)."""
    args = ["models", "import", ref, "--json"]
    if name:
        args += ["--name", name]
    if getattr(sys, "frozen", False):
        return [sys.executable, *args]
    return [sys.executable, "-m", "app", *args]


def _is_gguf_url(url: Any) -> bool:
    return url.isLocalFile() and url.toLocalFile().lower().endswith(".gguf")


def is_gguf_drop(event: Any) -> bool:
    """A drag that carries only local .gguf files."""
    urls = event.mimeData().urls() if event.mimeData().hasUrls() else []
    return bool(urls) and all(_is_gguf_url(u) for u in urls)


class FoundModelsPanel(QWidget):
    imported = Signal(str)  # store name of the new checkpoint
    import_failed = Signal(str)  # plain message
    found_listed = Signal()  # discovery shown (tests)
    plan_shown = Signal(str)  # an import's size and precision worked out (tests)

    def __init__(self, bg: Background, parent: QWidget | None = None):
        super().__init__(parent)
        self.bg = bg
        self.found: list[Any] = []
        self.imported_names: dict[str, str] = {}  # source path -> store name
        self.proc: QProcess | None = None
        self._stderr_tail = ""
        self._last_error = ""
        self.models_dir_of: Any = None  # () -> the folder imports go to (None: the default)
        self.plans: dict[str, Any] = {}  # source path -> ImportPlan, or a plain error
        self._plan_line = ""  # what the running import makes (its first message)
        self.setAcceptDrops(True)
        self._build()

    def _build(self) -> None:
        title = QLabel("Found on this computer")
        title.setProperty("role", "title")
        hint = QLabel(
            "GGUF models from LM Studio, Ollama, llama.cpp and the Hugging Face cache. "
            "Importing converts one to MLX; the GGUF stays where it is. Drop a .gguf file here "
            "to import it."
        )
        hint.setProperty("role", "muted")
        hint.setWordWrap(True)
        self.tree = QTreeWidget()
        self.tree.setObjectName("found_models")
        self.tree.setColumnCount(len(COLUMNS))
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setRootIsDecorated(False)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.tree.itemSelectionChanged.connect(self._update_buttons)
        self.tree.itemDoubleClicked.connect(lambda _i, _c: self.import_selected())
        self.rescan_btn = QPushButton("Rescan")
        self.rescan_btn.clicked.connect(self.refresh)
        self.import_btn = QPushButton("Import selected")
        self.import_btn.setProperty("role", "primary")
        self.import_btn.clicked.connect(self.import_selected)
        self.file_btn = QPushButton("Import GGUF file…")
        self.file_btn.clicked.connect(lambda: self.import_file())
        row = QHBoxLayout()
        row.addWidget(self.rescan_btn)
        row.addWidget(self.file_btn)
        row.addStretch(1)
        row.addWidget(self.import_btn)
        self.status = QLabel("")
        self.status.setProperty("role", "muted")
        self.status.setWordWrap(True)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.clicked.connect(self.cancel_import)
        prow = QHBoxLayout()
        prow.addWidget(self.bar, 1)
        prow.addWidget(self.cancel_btn)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(title)
        lay.addWidget(hint)
        lay.addWidget(self.tree, 1)
        lay.addLayout(row)
        lay.addWidget(self.status)
        lay.addLayout(prow)
        self._set_busy(False)

    # -- discovery ---------------------------------------------------------------------------
    def refresh(self, entries: list[Any] | None = None) -> None:
        """Rescan the libraries; ``entries`` (store entries) mark what is already imported."""
        if entries is not None:
            from app.checkpoints.gguf_import import converted_from

            self.imported_names = {}
            for e in entries:
                rec = converted_from(e.path)
                if rec and rec.get("source_files"):
                    self.imported_names[str(rec["source_files"][0])] = e.name

        def work() -> list[Any]:
            from app.checkpoints.discovery import discover

            return discover()

        self.bg.run(work, self._on_found, lambda m: self.status.setText(f"Could not scan: {m}"))

    def _on_found(self, found: list[Any]) -> None:
        self.found = found
        self.tree.clear()
        for f in found:
            done = self._imported_as(f)
            status = (
                f"imported as {done}" if done
                else "ready to import" if f.supported else (f.reason or "unsupported")
            )  # fmt: skip
            if f.supported and not f.has_chat_template and not done:
                status += " (base model: no chat template)"
            item = QTreeWidgetItem([
                f.name, f.where, f.architecture or "?", f.quantization or "?",
                format_bytes(f.size_bytes), status,
            ])  # fmt: skip
            item.setData(0, ROLE_FOUND, f)
            item.setToolTip(0, str(f.path))
            item.setToolTip(5, f.reason or status)
            if not f.supported:
                item.setDisabled(True)
            self.tree.addTopLevelItem(item)
        if not self.proc:
            n = len(found)
            self.status.setText(
                f"{n} GGUF model{'s' if n != 1 else ''} found." if n
                else "No GGUF models found in LM Studio, Ollama, llama.cpp or the HF cache."
            )  # fmt: skip
        self._update_buttons()
        self.found_listed.emit()

    def selected(self) -> Any | None:
        items = self.tree.selectedItems()
        return items[0].data(0, ROLE_FOUND) if items else None

    def _update_buttons(self) -> None:
        f = self.selected()
        busy = self.proc is not None
        plan = self.plans.get(str(f.path)) if f is not None else None
        refused = isinstance(plan, str) or bool(plan is not None and hasattr(plan, "refusal")
                                                and plan.refusal())
        self.import_btn.setEnabled(bool(f and f.supported and not busy and not refused))
        self.file_btn.setEnabled(not busy)
        if f is not None and f.supported and not busy and not self._imported_as(f):
            self._show_plan(f)

    def _imported_as(self, f: Any) -> str | None:
        return self.imported_names.get(str(f.path)) or self.imported_names.get(
            str(Path(f.path).resolve()))

    # -- what an import will make, said before it starts -----------------------------------------
    def _show_plan(self, f: Any) -> None:
        key = str(f.path)
        plan = self.plans.get(key)
        if plan is None:
            self.status.setText(f"Working out how big the MLX copy of {f.name} will be…")
            self.plans[key] = _PENDING  # one look-up per file
            models_dir = self.models_dir_of() if self.models_dir_of else None

            def work() -> Any:
                from app.checkpoints.gguf_plan import plan_import

                if models_dir is None:
                    from app.checkpoints.store import Store

                    return plan_import(f.path, dest_dir=Store().models_dir)
                return plan_import(f.path, dest_dir=models_dir)

            def done(p: Any) -> None:
                self.plans[key] = p
                self._plan_ready(key)

            def failed(message: str) -> None:
                self.plans[key] = message
                self._plan_ready(key)

            self.bg.run(work, done, failed)
            return
        if isinstance(plan, str):
            self.status.setText(plan)
        elif hasattr(plan, "describe"):
            self.status.setText(plan.refusal() or plan.describe())

    def _plan_ready(self, key: str) -> None:
        self.plan_shown.emit(key)
        f = self.selected()
        if f is not None and str(f.path) == key:
            self._update_buttons()

    # -- import ------------------------------------------------------------------------------
    def import_selected(self) -> None:
        f = self.selected()
        if f is not None and f.supported:
            self.start_import(f.id, label=f.name)

    def import_file(self, path: str | None = None) -> None:
        if path is None:
            path, _ = QFileDialog.getOpenFileName(
                self, "Import a GGUF model", str(Path.home()), "GGUF models (*.gguf)"
            )
        if path:
            self.start_import(path, label=Path(path).name)

    def start_import(self, ref: str, *, label: str, name: str | None = None) -> bool:
        if self.proc is not None:
            return False
        cmd = import_command(ref, name)
        proc = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        env.insert("DRAFTPAIR_NO_BLAS_FIX", "1")  # conversion does no matrix products
        proc.setProcessEnvironment(env)
        if not getattr(sys, "frozen", False):
            proc.setWorkingDirectory(str(Path(__file__).resolve().parents[2]))
        proc.readyReadStandardError.connect(self._on_ready_read)  # bound: no reference cycle
        proc.finished.connect(self._on_finished)
        self.proc = proc
        self._stderr_tail = ""
        self._last_error = ""
        self.status.setText(f"Importing {label}…")
        self._plan_line = ""
        self.bar.setValue(0)
        self._set_busy(True)
        proc.start(cmd[0], cmd[1:])
        return True

    def _on_ready_read(self) -> None:
        if self.proc is not None:
            self._read_stderr(self.proc)

    def _read_stderr(self, proc: QProcess, final: bool = False) -> None:
        self._stderr_tail += bytes(proc.readAllStandardError().data()).decode("utf-8", "replace")
        if final:
            self._stderr_tail += "\n"
        *lines, self._stderr_tail = self._stderr_tail.split("\n")
        for line in lines:
            try:
                p = json.loads(line)
            except ValueError:
                if line.strip() and "PyTorch was not found" not in line:
                    self._last_error = line.strip().removeprefix("draftpair: error: ")
                continue
            if isinstance(p, dict) and "message" in p:
                total = int(p.get("total") or 0)
                if total:
                    self.bar.setValue(int(1000 * int(p.get("done") or 0) / total))
                if p.get("plan"):  # what the copy will be: stays above the steps
                    self._plan_line = str(p["message"])
                    self.status.setText(self._plan_line)
                    continue
                step = str(p["message"]) + "…"
                self.status.setText(f"{self._plan_line}\n{step}" if self._plan_line else step)

    def _on_finished(self, code: int, _status: Any) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        self._read_stderr(proc, final=True)
        out = bytes(proc.readAllStandardOutput().data()).decode("utf-8", "replace").strip()
        proc.deleteLater()
        self._set_busy(False)
        result = None
        if code == 0 and out:
            try:
                result = json.loads(out.splitlines()[-1])
            except ValueError:
                result = None
        if isinstance(result, dict) and result.get("name"):
            name = str(result["name"])
            note = "" if result.get("has_chat_template") else (
                " It has no chat template (a base model): chat will join turns as plain text."
            )  # fmt: skip
            self.status.setText(f"Imported {name}.{note}")
            self.bar.setValue(1000)
            self.imported.emit(name)
            return
        msg = "The import was cancelled; nothing was kept." if code == 130 else (
            self._last_error or f"The import stopped (exit code {code})."
        )  # fmt: skip
        self.status.setText(msg)
        self.bar.setValue(0)
        self.import_failed.emit(msg)

    def cancel_import(self) -> None:
        if self.proc is None:
            return
        pid = int(self.proc.processId())
        if pid > 0 and hasattr(signal, "SIGINT") and os.name == "posix":
            os.kill(pid, signal.SIGINT)  # the importer removes its partial output
        else:
            self.proc.kill()
        self.status.setText("Cancelling…")

    def shutdown(self, timeout_ms: int = 10000) -> None:
        if self.proc is not None:
            self.cancel_import()
            self.proc.waitForFinished(timeout_ms)

    def _set_busy(self, busy: bool) -> None:
        self.bar.setVisible(busy)
        self.cancel_btn.setVisible(busy)
        self._update_buttons()

    # -- drag and drop -----------------------------------------------------------------------
    def dragEnterEvent(self, event) -> None:  # noqa: N802 - Qt API
        if is_gguf_drop(event) and self.proc is None:
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event) -> None:  # noqa: N802 - Qt API
        urls = [u for u in event.mimeData().urls() if _is_gguf_url(u)]
        if urls:
            event.acceptProposedAction()
            self.import_file(urls[0].toLocalFile())
