"""Live pyqtgraph panels: tokens/s, accepted length per round, memory.

Fed by ``LiveRun`` ring buffers; a 15 Hz timer calls ``setData`` once per curve per tick and
the numeric labels change once a second (Friture's fast and slow timers). Several runs can be
overlaid (Compare); the timer stops by itself once every run shown is finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtGui import QColor, QResizeEvent
from PySide6.QtWidgets import QGridLayout, QLabel, QSizePolicy, QWidget

from app.kinds.shares import word
from app.ui.live import LiveRun, LiveSnapshot
from app.ui.theme import LIGHT, Colors

FAST_HZ = 12
LABEL_EVERY = FAST_HZ  # ticks between label updates (~1 Hz)
ACCEPT_TITLE = "Accepted per round"
# auto speculation's sources, in the order a reply first used them (readable on both themes)
SOURCE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


@dataclass
class _RunCurves:
    run: LiveRun
    name: str
    color: str
    items: dict[str, pg.PlotDataItem] = field(default_factory=dict)
    last: LiveSnapshot | None = None
    painted_version: int = -1
    painted_counts: tuple[int, int, int] = (-1, -1, -1)


def _plot(title: str, left: str, bottom: str) -> pg.PlotWidget:
    w = pg.PlotWidget()
    w.setMenuEnabled(False)
    w.setMouseEnabled(x=False, y=False)
    w.hideButtons()
    item = w.getPlotItem()
    item.setTitle(title, size="10pt")
    item.setLabel("left", left)
    item.setLabel("bottom", bottom)
    item.showGrid(x=True, y=True, alpha=0.15)
    for name in ("left", "bottom", "right"):
        item.getAxis(name).enableAutoSIPrefix(False)  # "seconds (x0.001)" confuses people
    item.setClipToView(True)
    item.setDownsampling(mode="peak")
    w.setMinimumHeight(150)
    w.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
    return w


class LivePanels(QWidget):
    def __init__(self, parent: QWidget | None = None, *, colors: Colors = LIGHT):
        super().__init__(parent)
        self.colors = colors
        self.rate_plot = _plot("Tokens/s (1 s window)", "tok/s", "seconds")
        self.accept_plot = _plot(ACCEPT_TITLE, "tokens", "round")
        self.mem_plot = _plot("Memory", "MB", "seconds")
        self.rate_plot.getPlotItem().enableAutoRange(y=False)
        self.accept_plot.getPlotItem().enableAutoRange(y=False)
        self._sys_vb = self._add_percent_axis(self.mem_plot)
        self.rate_label = QLabel("–")
        self.accept_label = QLabel("–")
        self.mem_label = QLabel("–")
        for lab in (self.rate_label, self.accept_label, self.mem_label):
            lab.setProperty("role", "stats")
            lab.setWordWrap(True)
            lab.setTextFormat(Qt.TextFormat.RichText)
            lab.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            # room for three wrapped lines, so a narrow window never lays them over the plots
            lab.setMinimumHeight(lab.fontMetrics().lineSpacing() * 3)
            lab.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(2)
        for col, (plot, label) in enumerate(
            (
                (self.rate_plot, self.rate_label),
                (self.accept_plot, self.accept_label),
                (self.mem_plot, self.mem_label),
            )
        ):
            grid.addWidget(plot, 0, col)
            grid.addWidget(label, 1, col)
            grid.setColumnStretch(col, 1)
        self._runs: list[_RunCurves] = []
        self._extra = 0  # height the wrapped labels need beyond their minimum
        self._ticks = 0
        self.timer = QTimer(self)
        self.timer.setInterval(int(1000 / FAST_HZ))
        self.timer.timeout.connect(self.refresh)
        self.apply_colors(colors)

    # -- setup ----------------------------------------------------------------------------
    def _add_percent_axis(self, w: pg.PlotWidget) -> pg.ViewBox:
        item = w.getPlotItem()
        vb = pg.ViewBox()
        vb.setMouseEnabled(x=False, y=False)
        item.showAxis("right")
        item.scene().addItem(vb)
        item.getAxis("right").linkToView(vb)
        item.getAxis("right").setLabel("system used %")
        vb.setXLink(item)
        vb.setYRange(0, 100, padding=0)

        def sync() -> None:
            vb.setGeometry(item.vb.sceneBoundingRect())
            vb.linkedViewChanged(item.vb, vb.XAxis)

        item.vb.sigResized.connect(sync)
        return vb

    def apply_colors(self, c: Colors) -> None:
        self.colors = c
        for w in (self.rate_plot, self.accept_plot, self.mem_plot):
            w.setBackground(c.base)
            item = w.getPlotItem()
            for name in ("left", "bottom", "right"):
                axis = item.getAxis(name)
                axis.setPen(pg.mkPen(c.border))
                axis.setTextPen(pg.mkPen(c.muted))
            item.titleLabel.setText(item.titleLabel.text, color=c.text, size="10pt")
        self.set_runs([(r.run, r.name, r.color) for r in self._runs], keep_timer=True)

    def set_runs(self, runs: list[tuple[LiveRun, str, str]], *, keep_timer: bool = False) -> None:
        """Show these runs (each: live data, legend name, colour) and start refreshing."""
        if getattr(self, "_legend", None):  # the last reply's sources (auto) are not these
            self._legend = None
            self.accept_plot.setTitle(ACCEPT_TITLE, color=self.colors.text, size="10pt")
        for rc in self._runs:
            for key, item in rc.items.items():
                if key == "sys":
                    self._sys_vb.removeItem(item)
                elif key == "rate":
                    self.rate_plot.removeItem(item)
                elif key in ("accepted", "mean"):
                    self.accept_plot.removeItem(item)
                else:
                    self.mem_plot.removeItem(item)
        self._runs = []
        single = len(runs) == 1
        c = self.colors
        for run, name, color in runs:
            rc = _RunCurves(run, name, color)
            width = 2
            rc.items["rate"] = self.rate_plot.plot(pen=pg.mkPen(color, width=width))
            rc.items["accepted"] = self.accept_plot.plot(
                pen=None, symbol="o", symbolSize=5, symbolPen=None,
                symbolBrush=pg.mkBrush(QColor(color).lighter(130) if c.dark else QColor(color).lighter(150)),
            )
            rc.items["mean"] = self.accept_plot.plot(pen=pg.mkPen(color, width=width))
            mlx_color = c.mem_mlx if single else color
            rss_color = c.mem_rss if single else color
            rc.items["mlx"] = self.mem_plot.plot(pen=pg.mkPen(mlx_color, width=width))
            rc.items["rss"] = self.mem_plot.plot(
                pen=pg.mkPen(rss_color, width=width, style=Qt.PenStyle.DashLine)
            )
            rc.items["swap"] = self.mem_plot.plot(
                pen=pg.mkPen(c.mem_swap, width=1, style=Qt.PenStyle.DotLine)
            )
            sys_item = pg.PlotDataItem(
                pen=pg.mkPen(c.mem_sys if single else color, width=1, style=Qt.PenStyle.DotLine)
            )
            self._sys_vb.addItem(sys_item)
            rc.items["sys"] = sys_item
            self._runs.append(rc)
        self._ticks = 0
        self._y_rate: tuple[float, float] | None = None
        self._y_acc: tuple[float, float] | None = None
        if self._runs:
            self.refresh(force_labels=True)
            if not keep_timer or self.timer.isActive():
                self.timer.start()

    def clear(self) -> None:
        self.timer.stop()
        self.set_runs([])
        for lab in (self.rate_label, self.accept_label, self.mem_label):
            lab.setText("–")

    def stop(self) -> None:
        self.timer.stop()

    # -- painting ----------------------------------------------------------------------------
    def refresh(self, force_labels: bool = False) -> None:
        self._ticks += 1
        label_tick = force_labels or self._ticks % LABEL_EVERY == 0
        if not force_labels and all(rc.run.version() == rc.painted_version for rc in self._runs):
            if label_tick:
                self._update_labels()
            return  # nothing new: no setData, no repaint (cheap idle ticks)
        all_done = True
        max_rate = 1.0
        max_acc = 1.0
        for rc in self._runs:
            snap = rc.run.snapshot()
            rc.painted_version = snap.version
            rc.last = snap
            all_done = all_done and snap.done
            # setData (and so a repaint) only for the curves whose buffer got new rows
            changed = [a != b for a, b in zip(snap.counts, rc.painted_counts, strict=True)]
            rc.painted_counts = snap.counts
            r = snap.rate
            if len(r):
                if changed[0]:
                    rc.items["rate"].setData(r[:, 0], r[:, 1], skipFiniteCheck=True)
                max_rate = max(max_rate, float(np.max(r[:, 1])))
            elif changed[0]:
                rc.items["rate"].setData([], [])
            a = snap.rounds
            if len(a):
                if changed[1]:
                    rc.items["accepted"].setData(a[:, 0], a[:, 1], skipFiniteCheck=True,
                                                 **self._source_brushes(snap, a))
                    rc.items["mean"].setData(a[:, 0], a[:, 2], skipFiniteCheck=True)
                max_acc = max(max_acc, float(np.max(a[:, 1])))
            elif changed[1]:
                rc.items["accepted"].setData([], [])
                rc.items["mean"].setData([], [])
            m = snap.memory
            if len(m) and changed[2]:
                rc.items["mlx"].setData(m[:, 0], m[:, 1], skipFiniteCheck=True)
                rc.items["rss"].setData(m[:, 0], m[:, 2], skipFiniteCheck=True)
                rc.items["sys"].setData(m[:, 0], m[:, 3], skipFiniteCheck=True)
                if float(np.max(m[:, 4])) > 0:
                    rc.items["swap"].setData(m[:, 0], m[:, 4], skipFiniteCheck=True)
        y_rate = (0.0, max_rate * 1.15)
        if y_rate != getattr(self, "_y_rate", None):  # no relayout when nothing moved
            self._y_rate = y_rate
            self.rate_plot.setYRange(*y_rate, padding=0)
        y_acc = (0.0, max_acc + 0.5)
        if y_acc != getattr(self, "_y_acc", None):
            self._y_acc = y_acc
            self.accept_plot.setYRange(*y_acc, padding=0)
        if label_tick or all_done:
            self._update_labels()
        if all_done and self.timer.isActive():
            self.timer.stop()

    def _source_brushes(self, snap: Any, a: np.ndarray) -> dict[str, Any]:
        """Auto speculation's rounds, one colour per source (and the legend in the title)."""
        if not snap.sources or a.shape[1] < 4:
            return {}
        palette = SOURCE_COLORS
        brushes = [pg.mkBrush(palette[int(c) % len(palette)] if c >= 0 else "#888888")
                   for c in a[:, 3]]
        if snap.sources != getattr(self, "_legend", None):
            self._legend = snap.sources
            legend = " · ".join(f"<span style='color:{palette[i % len(palette)]}'>{word(n)}"
                                f"</span>" for i, n in enumerate(snap.sources))
            self.accept_plot.setTitle(f"{ACCEPT_TITLE}: {legend}", color=self.colors.text,
                                      size="10pt")
        return {"symbolBrush": brushes}

    def _update_labels(self) -> None:
        rate, acc, mem = [], [], []
        for rc in self._runs:
            s = rc.last
            if s is None:
                continue
            prefix = f"{rc.name}: " if len(self._runs) > 1 else ""
            cum = s.tokens / s.elapsed_s if s.elapsed_s > 0 else 0.0
            if s.tokens:
                rate.append(f"{prefix}{s.tokens} tokens in {s.elapsed_s:.1f} s · {cum:.1f} tok/s overall")
            elif s.prefill is not None and s.prefill[0] < s.prefill[1] and not s.done:
                done, total, tps, reused = s.prefill
                more = f", {reused:,} reused" if reused else ""
                rate.append(f"{prefix}reading the prompt: {done:,} / {total:,} tokens · "
                            f"{tps:,.0f} tok/s{more}")
            else:
                rate.append(f"{prefix}{s.stage}…" if not s.done else f"{prefix}no tokens")
            if len(s.rounds):
                last = s.rounds[-1]
                trees = getattr(s, "trees", (0, 0.0))
                tree_note = (f" · {trees[0]} as trees, accepted path {trees[1]:.2f} deep"
                             if trees[0] else "")
                acc.append(f"{prefix}{int(last[0]) + 1} rounds · mean {last[2]:.2f} "
                           f"accepted/round{tree_note}")
            else:
                acc.append(f"{prefix}no speculative rounds")
            if len(s.memory):
                last = s.memory[-1]
                c = self.colors
                single = len(self._runs) == 1
                mlx_c = c.mem_mlx if single else rc.color
                rss_c = c.mem_rss if single else rc.color
                sys_c = c.mem_sys if single else rc.color
                text = (
                    f"{prefix}<span style='color:{mlx_c}'>MLX {last[1]:.0f} MB</span>"
                    f" · <span style='color:{rss_c}'>RSS {last[2]:.0f} MB (dashed)</span>"
                    f" · <span style='color:{sys_c}'>system {last[3]:.0f}% (dotted)</span>"
                    f" · swap {last[4]:.0f} MB"
                )
                if s.prompt_cache_bytes:
                    text += f" · kept chats {s.prompt_cache_bytes / 2**20:.0f} MB"
                if s.pressure:
                    text += f" · pressure {s.pressure}"
                mem.append(text)
        self.rate_label.setText("<br>".join(rate) or "–")
        self.accept_label.setText("<br>".join(acc) or "–")
        self.mem_label.setText("<br>".join(mem) or "–")
        self._check_extra()

    def _check_extra(self) -> None:
        extra = self._labels_extra()
        if extra != self._extra:  # the wrapped labels need more (or less) height: ask for it
            self._extra = extra
            self.updateGeometry()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        QTimer.singleShot(0, self, self._check_extra)  # once the labels have their new width

    def _labels_extra(self) -> int:
        """Height the wrapped labels need beyond their three-line minimum at their width."""
        labels = (self.rate_label, self.accept_label, self.mem_label)
        return max(0, max(lab.heightForWidth(lab.width()) - lab.minimumHeight() for lab in labels))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        # a grid does not count wrapped text in its minimum: without this, a narrow window
        # lays the labels over the plots' axis titles
        hint = super().minimumSizeHint()
        return QSize(hint.width(), hint.height() + self._extra)

    def export_png(self, path: str) -> bool:
        return self.grab().save(path, "PNG")
