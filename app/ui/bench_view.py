"""The Bench view: run the task suite on the loaded pair, see speedups and a recommendation.

The measurement itself is ``app.bench.run_bench`` on the engine worker thread (the numbers are
the ones ``draftpair bench`` reports); this view only starts it, shows progress and results.
"""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.bench.stats import MIN_RUNS
from app.ui.format import KIND_LABELS
from app.ui.theme import Colors
from app.ui.view_deps import View, ViewDeps
from app.ui.widgets import splitter
from app.ui.worker import ModelState

QUICK_RUNS = 1  # BenchConfig.quick_preset measures each task once
FULL_RUNS = 3

COLUMNS = ("Task", "Kind", "T", "Speculation", "tok/s", "Speedup", "Verdict", "Accepted/round",
           "Same text as off")


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 60}:{s % 60:02d}"


class BenchView(View):
    bench_done = Signal(object)  # BenchReport | None

    def __init__(self, deps: ViewDeps, parent: QWidget | None = None):
        super().__init__(deps, parent)
        client = self.client
        self.report: Any = None
        self._running = False
        self._started = time.monotonic()
        self._build()
        client.bench_progress.connect(self._on_progress)
        client.bench_finished.connect(self._on_finished)
        self.on_model_state(client.state)

    def _build(self) -> None:
        title = QLabel("Bench: which speculation pays on which kind of task")
        title.setProperty("role", "title")
        self.preset = QComboBox()
        self.preset.addItem("Quick (about a minute on an idle computer)", "quick")
        self.preset.setItemData(0, "The 2 quick tasks at temperature 0, each measured once with "
                                "short replies, DraftPair's own rows only. Other programs "
                                "using the CPU make it take longer.", Qt.ItemDataRole.ToolTipRole)
        self.preset.addItem("Full (several minutes: every task, repeats)", "full")
        self.preset.setItemData(1, "Every task, measured Runs times each (medians), with the "
                                "mlx-lm rows beside DraftPair's.", Qt.ItemDataRole.ToolTipRole)
        self.preset.currentIndexChanged.connect(self._on_preset)
        self.runs = QSpinBox()
        self.runs.setRange(1, 10)
        self.runs.setValue(QUICK_RUNS)
        self._full_runs = FULL_RUNS  # what Full measures with; Quick always runs each once
        self.runs.setToolTip("Repeats per task and condition (Full only); medians are reported. "
                             f"A recommendation needs {MIN_RUNS + 1} or more.")
        self.hot = QCheckBox("Also at temperature 1")
        self.run_btn = QPushButton("Run bench")
        self.run_btn.setProperty("role", "primary")
        self.run_btn.clicked.connect(self.run)
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.clicked.connect(self.stop)
        self.export_btn = QPushButton("Save report…")
        self.export_btn.setToolTip("report.json, runs.csv, report.md and speedup.png")
        self.export_btn.clicked.connect(lambda: self.export())
        row = QHBoxLayout()
        row.addWidget(self.preset)
        row.addWidget(QLabel("Runs"))
        row.addWidget(self.runs)
        row.addWidget(self.hot)
        row.addStretch(1)
        # the buttons share the progress bar's row, so the view fits a 1024-pixel-wide window
        actions = QHBoxLayout()
        actions.addWidget(self.run_btn)
        actions.addWidget(self.stop_btn)
        actions.addWidget(self.export_btn)
        self.pair_label = QLabel("")
        self.pair_label.setProperty("role", "muted")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        self.progress.setFormat("idle")
        self.message = QLabel("")
        self.message.setProperty("role", "muted")

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("bench_table")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        hdr = self.table.horizontalHeader()
        hdr.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        hdr.setStretchLastSection(True)

        self.chart = pg.PlotWidget()
        self.chart.setObjectName("bench_chart")
        self.chart.setMenuEnabled(False)
        self.chart.setMouseEnabled(x=False, y=False)
        self.chart.hideButtons()
        item = self.chart.getPlotItem()
        item.setTitle("Speedup vs plain decoding", size="10pt")
        item.setLabel("bottom", "speedup ×")
        item.showGrid(x=True, alpha=0.15)
        item.getAxis("bottom").enableAutoSIPrefix(False)
        item.hideAxis("left")  # each bar carries its own label
        self._bars: list[Any] = []
        self._apply_chart_colors()
        self.recs = QLabel("")
        self.recs.setWordWrap(True)
        self.recs.setTextFormat(Qt.TextFormat.RichText)
        self.recs.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.chart.setMinimumWidth(320)
        rec_title = QLabel("Recommendation")
        rec_title.setProperty("role", "title")
        right = QWidget()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(0, 0, 0, 0)
        rv.addWidget(rec_title)
        rv.addWidget(self.recs)
        rv.addWidget(self.chart, 1)

        split = splitter(Qt.Orientation.Horizontal, (self.table, 3), (right, 2), sizes=[680, 580])
        outer = self.body_layout()
        outer.addWidget(title)
        outer.addWidget(self.pair_label)
        outer.addLayout(row)
        actions.addWidget(self.progress, 1)
        outer.addLayout(actions)
        outer.addWidget(self.message)
        outer.addWidget(split, 1)
        self._update_buttons()

    def _apply_chart_colors(self) -> None:
        c = self.colors
        self.chart.setBackground(c.base)
        item = self.chart.getPlotItem()
        for name in ("bottom",):
            item.getAxis(name).setPen(pg.mkPen(c.border))
            item.getAxis(name).setTextPen(pg.mkPen(c.muted))
        item.titleLabel.setText(item.titleLabel.text, color=c.text, size="10pt")

    def _draw_chart(self, rows: list[dict]) -> None:
        c = self.colors
        item = self.chart.getPlotItem()
        for b in self._bars:
            item.removeItem(b)
        self._bars = []
        rows = [r for r in rows if r.get("condition") != "off" and r.get("speedup") is not None]
        palette = [c.on_run, c.mem_rss, c.mem_sys, c.ok, c.warn]
        conditions = sorted({r["condition"] for r in rows})
        for i, r in enumerate(reversed(rows)):
            color = palette[conditions.index(r["condition"]) % len(palette)]
            # the bar in the lower part of its row, its label above it: never on top of it
            bar = pg.BarGraphItem(x0=[0], y=[i - 0.17], height=[0.42], width=[r["speedup"]],
                                  brush=pg.mkBrush(color), pen=pg.mkPen(None))
            item.addItem(bar)
            self._bars.append(bar)
            label = {"off": "Off", **KIND_LABELS}.get(r["condition"], r["condition"])
            text = pg.TextItem(
                f"{r['task_id']} T={r['temperature']:g} · {label}   {r['speedup']:.2f}×",
                color=c.text, anchor=(0, 1),  # sits just on top of its bar
            )
            text.setPos(0.0, i + 0.06)
            item.addItem(text)
            self._bars.append(text)
        line = pg.InfiniteLine(pos=1.0, angle=90, pen=pg.mkPen(c.muted, style=Qt.PenStyle.DashLine))
        item.addItem(line)
        self._bars.append(line)
        top = max([r["speedup"] for r in rows] + [1.2])
        item.setXRange(0, top * 1.1, padding=0)
        item.setYRange(-0.6, max(len(rows) - 0.4, 0.6), padding=0)

    def apply_colors(self, c: Colors) -> None:
        self.colors = c
        self._apply_chart_colors()
        if self.report is not None:
            self._show(self.report)

    def on_model_state(self, state: ModelState) -> None:
        if state.target:
            draft = f" and draft {state.draft}" if state.draft else " (no draft model: the draft-model rows are skipped)"
            self.pair_label.setText(f"Runs on the loaded pair: {state.target}{draft}.")
        else:
            self.pair_label.setText("Load a model first (Models).")
        self._update_buttons()

    def _on_preset(self) -> None:
        """The Runs box shows what the preset measures: 1 for Quick, the chosen number for Full."""
        if self.preset.currentData() == "full":
            self.runs.setValue(self._full_runs)
        else:
            if self.runs.isEnabled():
                self._full_runs = self.runs.value()
            self.runs.setValue(QUICK_RUNS)
        self._update_buttons()

    def _update_buttons(self) -> None:
        ready = bool(self.client.state.target) and not self.client.busy_loading
        self.run_btn.setEnabled(ready and not self._running)
        self.stop_btn.setEnabled(self._running)
        self.export_btn.setEnabled(self.report is not None and not self._running)
        full = self.preset.currentData() == "full"
        self.runs.setEnabled(full and not self._running)
        self.preset.setEnabled(not self._running)
        self.hot.setEnabled(not self._running)

    def run(self) -> None:
        if self._running or not self.run_btn.isEnabled():
            return
        if self.client.busy:
            self.show_error("Wait for the reply or comparison to finish, then run the bench.")
            return
        from app.bench import BenchConfig

        temps = (0.0, 1.0) if self.hot.isChecked() else (0.0,)
        st = self.client.state
        common = dict(model=st.target_path or "demo", draft_model=st.draft_path, temperatures=temps)
        if self.preset.currentData() == "quick":
            config = BenchConfig.quick_preset(**common)
        else:
            config = BenchConfig(runs=self.runs.value(), **common)
        self._running = True
        self._started = time.monotonic()
        self.report = None
        self.table.setRowCount(0)
        self.recs.setText("")
        self._draw_chart([])
        self.progress.setValue(0)
        self.progress.setFormat("starting… %p%")
        self.message.setText("Warming up; each task runs with speculation off and on, alternately.")
        self.client.bench(config)
        self._update_buttons()

    def stop(self) -> None:
        if self.client.bench_cancel is not None:
            self.client.bench_cancel.set()
            self.message.setText("Stopping after the current request…")

    def _on_progress(self, p: Any) -> None:
        self.progress.setValue(int(1000 * p.fraction))
        elapsed = time.monotonic() - self._started
        left = ""
        if 0 < p.done < p.total:  # the runs so far say how long the rest takes
            left = f", about {_clock(elapsed / p.done * (p.total - p.done))} left"
        self.progress.setFormat(f"{p.done}/{p.total} runs · {_clock(elapsed)}{left}  (%p%)")
        self.message.setText(p.message)
        if p.rows is not None and self._running:  # a run finished: show what is measured so far
            self._fill_rows(list(p.rows))

    def _on_finished(self, report: Any, error: str) -> None:
        self._running = False
        if report is None:
            self.progress.setFormat("failed")
            self.show_error(f"Bench failed: {error}")
        else:
            self.report = report
            self.progress.setValue(1000)
            self.progress.setFormat("stopped early: partial results" if report.cancelled else "done")
            self._show(report)
        self._update_buttons()
        self.bench_done.emit(report)

    def _show(self, report: Any) -> None:
        c = self.colors
        self._fill_rows(report.summary.get("rows", []))
        try:
            from app.bench import recommend_drafters

            quick = bool((report.config or {}).get("quick"))
            more = (f"choose Full and set Runs to {MIN_RUNS + 1} or more" if quick
                    else f"set Runs to {MIN_RUNS + 1} or more")
            recs = recommend_drafters(report, more_runs=more)
        except Exception as exc:
            recs = {}
            self.recs.setText(f"No recommendation: {html.escape(str(exc))}")
        if recs:
            lines = []
            for kind, rec in recs.items():
                what = ("No recommendation yet" if rec.reason.startswith("too few runs")
                        else KIND_LABELS.get(rec.draft_kind, rec.draft_kind))
                speed = f" ({rec.speedup:.2f}×)" if rec.speedup else ""
                lines.append(f"<b>{html.escape(kind)}</b>: {html.escape(what)}{speed} — "
                             f"<span style='color:{c.muted}'>{html.escape(rec.reason)}</span>")
            self.recs.setText("<br>".join(lines))
        contention = report.summary.get("contention") or {}
        if contention.get("flagged_measured"):
            self.message.setText(
                f"{contention['flagged_measured']} runs were flagged: other programs used the CPU "
                "during them, so their numbers may be noisy."
            )

    def _fill_rows(self, rows: list[dict]) -> None:
        """The table and the chart for these summary rows (also while the bench runs)."""
        c = self.colors
        self.table.setRowCount(len(rows))
        verdict_color = {"faster": c.ok, "slower": c.bad, "baseline": c.muted}
        for r, row in enumerate(rows):
            ident = row.get("identity_vs_off") or {}
            same = "" if not ident else ("yes" if ident.get("identical") else
                                         f"no, from token {ident.get('first_divergence', '?')}")
            cond = row["condition"]
            cells = (
                row["task_id"], row.get("task_kind", ""), f"{row['temperature']:g}",
                {"off": "Off", **KIND_LABELS}.get(cond, cond), f"{row.get('decode_tps') or 0:.1f}",
                f"{row['speedup']:.2f}×" if row.get("speedup") is not None else "–",
                row.get("verdict", ""),
                f"{row['accept_len_mean']:.2f}" if row.get("accept_len_mean") is not None else "",
                same,
            )
            for col, text in enumerate(cells):
                item = QTableWidgetItem(str(text))
                if col == 6:
                    item.setForeground(QBrush(QColor(verdict_color.get(str(text), c.warn))))
                if row.get("flagged_runs") and col == 0:
                    item.setToolTip("Another program competed for the CPU during some runs.")
                self.table.setItem(r, col, item)
        self._draw_chart(rows)

    def export(self, folder: str | None = None) -> dict | None:
        if self.report is None:
            return None
        if folder is None:
            folder = QFileDialog.getExistingDirectory(self, "Save the bench report in…", str(Path.home()))
            if not folder:
                return None
        from app.bench import write_report

        try:
            out = write_report(self.report, folder)
        except OSError as exc:
            self.show_error(f"Could not save the report: {exc}")
            return None
        self.banner.show_message(f"Bench report saved in {folder}.", timeout_ms=6000)
        return out

    def shutdown(self) -> None:
        self.stop()
