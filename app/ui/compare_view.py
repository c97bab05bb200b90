"""The Compare view: one prompt, speculation off and on, alternating runs, a result card."""

from __future__ import annotations

import html
import json
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app import kinds
from app.bench.contention import RunContention
from app.bench.measure import WARMUP_TOKENS, ContentionMeter, PlannedRun
from app.ui.compare_card import card_html
from app.ui.compare_model import CompareSummary, RunResult, plan, summarize
from app.ui.format import KIND_LABELS
from app.ui.panels import LivePanels
from app.ui.remote_side import RemoteSide
from app.ui.text_runs import append_run
from app.ui.theme import Colors
from app.ui.view_deps import View, ViewDeps
from app.ui.widgets import SpecCombo, add_shortcut, splitter
from app.ui.worker import REMOTE, Job, ModelState

DEFAULT_PROMPT = (
    "Fix the spelling mistakes in this paragraph and return it unchanged otherwise:\n\n"
    "The libary opens at nine in the morning and closes at six in the evening. Visitors can "
    "borow up to five books at a time, and the reading room is quiet and confortable. "
    "Childern are welcome on weekends, when there is a story hour at eleven."
)


class CompareView(View):
    compare_finished = Signal(object)  # CompareSummary | None

    def __init__(self, deps: ViewDeps, parent: QWidget | None = None):
        super().__init__(deps, parent)
        client = self.client
        self._plan: list[PlannedRun[str]] = []
        self._step = 0
        self._job: Job | None = None
        self._current: PlannedRun[str] | None = None
        self.results: list[RunResult] = []
        self.summary: CompareSummary | None = None
        self._latest: dict[str, Job] = {}
        self._cpu: ContentionMeter | None = None
        self._contention: RunContention | None = None  # of the last finished measurement
        self._request_meta: dict = {}
        self._api_key: str | None = None
        self._stopping = False
        self._texts: dict[str, list[tuple[str, bool]]] = {"off": [], "on": []}
        self._build()
        self._text_timer = QTimer(self)
        self._text_timer.setInterval(66)
        self._text_timer.timeout.connect(self._drain)
        client.job_finished.connect(self._on_finished)
        self.on_model_state(client.state)

    def _build(self) -> None:
        s = self.settings
        self.prompt = QPlainTextEdit(DEFAULT_PROMPT)
        self.prompt.setObjectName("compare_prompt")
        self.prompt.setFixedHeight(92)
        self.kind_combo = SpecCombo(include_off=False)
        self.kind_combo.set_kind(s.compare_kind)
        self.kind_combo.kind_changed.connect(self._on_kind)
        self.width_spin = QSpinBox()
        self.width_spin.setRange(0, 64)
        self.width_spin.setSpecialValueText("auto")
        self.width_spin.setValue(s.draft_width)
        self.runs_spin = QSpinBox()
        self.runs_spin.setRange(1, 20)
        self.runs_spin.setValue(s.compare_runs)
        self.runs_spin.setToolTip("Off/on pairs, run alternately (off, on, off, on…)")
        self.max_spin = QSpinBox()
        self.max_spin.setRange(8, 4096)
        self.max_spin.setValue(s.compare_max_tokens)
        self.run_btn = QPushButton("Run comparison")
        self.run_btn.setProperty("role", "primary")
        self.run_btn.setToolTip("Run (Ctrl+Enter)")
        self.run_btn.clicked.connect(self.run)
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.setToolTip("Stop (Esc)")
        self.stop_btn.clicked.connect(self.stop)
        self.export_btn = QPushButton("Export…")
        self.export_btn.setToolTip("Save the panels as PNG and the numbers as JSON")
        self.export_btn.clicked.connect(lambda: self.export())
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.progress.setFormat("idle")
        self.progress.setValue(0)
        self.progress.setMinimumWidth(190)
        self.progress.setMaximumWidth(280)
        self.side = RemoteSide()
        self.side.changed.connect(self._on_side)

        side_row = QHBoxLayout()
        side_row.addWidget(QLabel("Speculation-on side"))
        side_row.addWidget(self.side, 1)
        side_row.addStretch(1)
        controls = QHBoxLayout()
        for label, w in (
            ("Speculation", self.kind_combo),
            ("Width", self.width_spin),
            ("Pairs", self.runs_spin),
            ("Max tokens", self.max_spin),
        ):
            controls.addWidget(QLabel(label))
            controls.addWidget(w)
        controls.addStretch(1)
        # the buttons get a row of their own, so the view fits a 1024-pixel-wide window
        actions = QHBoxLayout()
        actions.addWidget(self.run_btn)
        actions.addWidget(self.stop_btn)
        actions.addWidget(self.export_btn)
        actions.addWidget(self.progress, 1)
        actions.addStretch(1)
        note = QLabel(
            "Greedy decoding (temperature 0): exact speculation must give the same text as "
            "plain decoding. Warm-up runs are not counted."
        )
        note.setProperty("role", "muted")
        note.setWordWrap(True)

        self.off_title = QLabel("Speculation off")
        self.on_title = QLabel("Speculation on")
        for t in (self.off_title, self.on_title):
            t.setProperty("role", "title")
            t.setWordWrap(True)  # a long kind or endpoint name wraps instead of widening the view
        self.off_text = QTextBrowser()
        self.on_text = QTextBrowser()
        self.off_text.setObjectName("compare_off")
        self.on_text.setObjectName("compare_on")
        texts = QGridLayout()
        texts.addWidget(self.off_title, 0, 0)
        texts.addWidget(self.on_title, 0, 1)
        texts.addWidget(self.off_text, 1, 0)
        texts.addWidget(self.on_text, 1, 1)
        texts.setColumnStretch(0, 1)
        texts.setColumnStretch(1, 1)

        self.card = QFrame()
        self.card.setProperty("role", "card")
        self.card.setObjectName("result_card")
        card_l = QVBoxLayout(self.card)
        card_l.setContentsMargins(14, 10, 14, 10)
        self.card_title = QLabel("Result")
        self.card_title.setProperty("role", "title")
        self.card_body = QLabel("Run a comparison to see the speedup, whether the texts match, "
                                "and what speculation costs in memory.")
        self.card_body.setWordWrap(True)
        self.card_body.setTextFormat(Qt.TextFormat.RichText)
        self.card_body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.repeat_btn = QPushButton("Repeat")
        self.repeat_btn.setToolTip("Run the same comparison again")
        self.repeat_btn.clicked.connect(self.run)
        head = QHBoxLayout()
        head.addWidget(self.card_title)
        head.addStretch(1)
        head.addWidget(self.repeat_btn)
        card_l.addLayout(head)
        card_l.addWidget(self.card_body)
        card_l.addStretch(1)  # the result reads from the top of the card
        self.card.setMinimumWidth(260)
        self.card.setMaximumWidth(420)

        top = QWidget()
        tv = QVBoxLayout(top)
        tv.setContentsMargins(0, 0, 0, 0)
        hdr = QLabel("Compare: the same prompt with speculation off and on")
        hdr.setProperty("role", "title")
        tv.addWidget(hdr)
        tv.addWidget(self.prompt)
        tv.addLayout(side_row)
        tv.addLayout(controls)
        tv.addLayout(actions)
        tv.addWidget(note)
        mid = QHBoxLayout()
        mid.addLayout(texts, 1)
        mid.addWidget(self.card)
        tv.addLayout(mid, 1)

        self.panels = LivePanels(colors=self.colors)
        self.body_layout().addWidget(splitter(Qt.Orientation.Vertical, (top, 3), (self.panels, 2)))

        add_shortcut(self, "Ctrl+Return", self.run)
        add_shortcut(self, Qt.Key.Key_Escape, self.stop)
        self._update_buttons()

    def apply_colors(self, c: Colors) -> None:
        self.colors = c
        self.panels.apply_colors(c)
        self._set_titles()
        for mode, view in (("off", self.off_text), ("on", self.on_text)):
            view.clear()
            for text, draft in self._texts[mode]:
                self._insert(view, text, draft)
        if self.summary is not None and not self._plan:
            self._show_summary(partial=False, contention=self._contention)

    def _insert(self, view: QTextBrowser, text: str, draft: bool) -> None:
        append_run(view, text, self.colors, highlight=draft)

    def _set_titles(self) -> None:
        kind = KIND_LABELS[self.kind_combo.kind()]
        if self.side.is_remote():
            kind = f"{html.escape(self.side.endpoint().split('://')[-1])} (remote)"
        self.off_title.setText(
            f"<span style='color:{self.colors.off_run}'>■</span> Speculation off"
        )
        self.on_title.setText(
            f"<span style='color:{self.colors.on_run}'>■</span> Speculation on: {kind}"
            f" <span style='font-weight:400; font-size:12px; background:{self.colors.draft_bg}'>"
            "&nbsp;accepted draft tokens&nbsp;</span>"
        )

    def on_model_state(self, state: ModelState) -> None:
        self.kind_combo.set_reasons(state.kinds)
        self._set_titles()
        self._update_buttons()

    def _on_side(self) -> None:
        self._set_titles()
        self._update_buttons()

    def _on_kind(self, kind: str) -> None:
        self.settings.compare_kind = kind
        self._set_titles()

    def _update_buttons(self) -> None:
        running = bool(self._plan)
        ready = bool(self.client.state.target) and not self.client.busy_loading
        self.run_btn.setEnabled(ready and not running)
        self.repeat_btn.setEnabled(ready and not running and bool(self.results))
        self.stop_btn.setEnabled(running)
        self.export_btn.setEnabled(not running and self.summary is not None)
        for w in (self.kind_combo, self.width_spin, self.runs_spin, self.max_spin, self.prompt,
                  self.side):
            w.setEnabled(not running)
        if self.side.is_remote():  # the endpoint speculates with its own settings
            self.kind_combo.setEnabled(False)
            self.width_spin.setEnabled(False)

    # -- running ---------------------------------------------------------------------------
    def run(self) -> None:
        if self._plan or not self.run_btn.isEnabled() and not self.repeat_btn.isEnabled():
            return
        if not self.client.state.target:
            self.banner.show_message("Load a model first (Models).", error=True)
            return
        if self.client.busy:
            self.banner.show_message(
                "Wait for the chat reply or the bench to finish, then compare.", error=True
            )
            return
        remote = self.side.endpoint() if self.side.is_remote() else None
        if remote is not None:
            from app.errors import DraftPairError
            from app.remote.client import parse_url

            try:
                parse_url(remote)
            except DraftPairError as exc:
                self.banner.show_message(str(exc), error=True)
                return
        reason = None if remote is not None else self.kind_combo.unavailable_reason()
        if reason:
            self.banner.show_message(
                f"{KIND_LABELS[self.kind_combo.kind()]} cannot run: {reason.rstrip('.')}. Choose another "
                "speculation kind.", error=True,
            )
            return
        self.settings.compare_runs = self.runs_spin.value()
        self.settings.compare_max_tokens = self.max_spin.value()
        self._plan = plan(self.runs_spin.value())
        self._step = 0
        self.results = []
        self.summary = None
        self._stopping = False
        self._contention = None
        self._latest = {}
        self.off_text.clear()
        self.on_text.clear()
        self.progress.setRange(0, len(self._plan))
        self.progress.setValue(0)
        self.card_body.setText("Measuring…")
        self._cpu = ContentionMeter()
        self._cpu.start()
        self._request_meta = {
            "prompt": self.prompt.toPlainText(),
            "kind": self.kind_combo.kind(),
            "width": self.width_spin.value() or None,
            "max_tokens": self.max_spin.value(),
            "pairs": self.runs_spin.value(),
            "model": self.client.state.target,
            "draft": self.client.state.draft,
            "remote": remote,
        }
        self._api_key = self.side.api_key()  # kept out of the exported request
        self._update_buttons()
        self._next()

    def _make_job(self, run: PlannedRun[str]) -> Job:
        from app.engine.events import GenerationRequest, SamplingParams

        meta = self._request_meta
        max_tokens = WARMUP_TOKENS if run.warmup else meta["max_tokens"]
        if run.condition == "on" and meta.get("remote"):
            from app.remote.client import RemoteRequest

            remote = RemoteRequest(url=meta["remote"], prompt=meta["prompt"], temperature=0.0,
                                   max_tokens=max_tokens, api_key=self._api_key)
            return Job(request=remote, tag="compare", source=REMOTE)
        local = GenerationRequest(
            prompt=meta["prompt"],
            draft_kind=meta["kind"] if run.condition == "on" else kinds.OFF,
            draft_width=meta["width"],
            sampling=SamplingParams(temperature=0.0),
            max_tokens=max_tokens,
            allow_fallback=True,
        )
        return Job(request=local, tag="compare")

    def _next(self) -> None:
        if self._stopping or self._step >= len(self._plan):
            self._finish()
            return
        run = self._plan[self._step]
        self._current = run
        job = self._make_job(run)
        self._job = job
        what = "warm-up" if run.warmup else f"pair {run.repeat + 1}/{self._request_meta['pairs']}"
        self.progress.setFormat(f"{what}: {run.condition}  (%v/%m)")
        if not run.warmup:
            self._latest[run.condition] = job
            (self.on_text if run.condition == "on" else self.off_text).clear()
            self._texts[run.condition] = []
            runs = []
            if "off" in self._latest:
                runs.append((self._latest["off"].live, "off", self.colors.off_run))
            if "on" in self._latest:
                runs.append((self._latest["on"].live, "on", self.colors.on_run))
            self.panels.set_runs(runs)
            self._text_timer.start()
        self.client.submit(job)

    def _drain(self) -> None:
        job = self._job
        if job is None or self._current is None or self._current.warmup:
            return
        mode = self._current.condition
        view = self.on_text if mode == "on" else self.off_text
        for seg in job.live.drain_text():
            self._texts[mode].append((seg.text, seg.from_draft))
            self._insert(view, seg.text, seg.from_draft)

    def _on_finished(self, job_id: int, done) -> None:
        if self._job is None or job_id != self._job.id:
            return
        self._drain()
        self._text_timer.stop()
        run = self._current
        assert run is not None
        self._job = None
        self._step += 1
        self.progress.setValue(self._step)
        if done.finish_reason == "error":
            self.banner.show_message(f"Compare run failed: {done.error}", error=True)
            self._stopping = True
        elif not run.warmup:
            self.results.append(RunResult(run.condition, run.repeat, done))
            if done.finish_reason != "cancelled":
                self._show_summary(partial=True)
        if done.finish_reason == "cancelled":
            self._stopping = True
        self._next()

    def stop(self) -> None:
        if not self._plan:
            return
        self._stopping = True
        if self._job is not None:
            self._job.cancel.set()

    def _finish(self) -> None:
        contention = self._cpu.stop() if self._cpu is not None else None
        self._cpu = None
        self._contention = contention
        self._plan = []
        self._current = None
        self._text_timer.stop()
        self.progress.setFormat("stopped at %v/%m runs" if self._stopping else "finished %v/%m runs")
        self._show_summary(partial=False, contention=contention)
        self._update_buttons()
        self.compare_finished.emit(self.summary)

    def _show_summary(self, *, partial: bool, contention: RunContention | None = None) -> None:
        remote = self._request_meta.get("remote")
        plugin = kinds.find(self._request_meta.get("kind"))
        local_draft = plugin is not None and plugin.draft_is_lm and not remote  # its weights
        draft_bytes = self.client.state.draft_bytes if local_draft else 0
        s = summarize(self.results, draft_weights_bytes=draft_bytes, contention=contention)
        self.summary = s
        if s is None:
            if not partial:
                self.card_body.setText("No complete off/on pair was measured.")
            return
        self.card_body.setText(card_html(s, self.colors, partial=partial))

    # -- export --------------------------------------------------------------------------------
    def export(self, path: str | None = None) -> tuple[str, str] | None:
        if self.summary is None:
            return None
        if path is None:
            path, _ = QFileDialog.getSaveFileName(
                self, "Export comparison", str(Path.home() / "draftpair-compare.json"),
                "JSON (*.json)",
            )
            if not path:
                return None
        json_path = Path(path).with_suffix(".json")
        png_path = Path(path).with_suffix(".png")
        data = {
            "request": self._request_meta,
            "summary": self.summary.to_dict(),
            "runs": [
                {"mode": r.mode, "repeat": r.repeat, **r.done.to_dict()} for r in self.results
            ],
        }
        try:
            json_path.write_text(json.dumps(data, indent=2), encoding="utf-8")
            if not self.panels.export_png(str(png_path)):
                raise OSError(0, "could not write the PNG")
        except OSError as exc:
            self.banner.show_message(f"Export failed: {exc.strerror or exc}.", error=True)
            return None
        self.banner.show_message(f"Saved {json_path.name} and {png_path.name} in {json_path.parent}.",
                                 timeout_ms=8000)
        return str(json_path), str(png_path)

    def shutdown(self) -> None:
        self._stopping = True
        self._text_timer.stop()
        self.panels.stop()
        if self._job is not None:
            self._job.cancel.set()
