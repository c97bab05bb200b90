"""The live panel of accepted tokens per round colours auto speculation's rounds by source."""

from __future__ import annotations

from PySide6.QtGui import QColor


def test_rounds_are_coloured_by_their_source(qtbot):
    from app.ui.live import LiveRun
    from app.ui.panels import SOURCE_COLORS, LivePanels

    panels = LivePanels()
    qtbot.addWidget(panels)
    run = LiveRun()
    panels.set_runs([(run, "reply", "#3366cc")])
    for i, source in enumerate(["mtp", "prompt-lookup", "mtp", "dflash"]):
        run.on_round(i, 2, source)
    run.on_done()
    panels.refresh(force_labels=True)
    snap = run.snapshot()
    assert snap.sources == ("mtp", "prompt-lookup", "dflash")  # in the order first used
    assert list(snap.rounds[:, 3]) == [0, 1, 0, 2]
    brushes = panels._runs[0].items["accepted"].opts["symbolBrush"]
    colours = [QColor(b.color()).name() for b in brushes]
    assert colours == [SOURCE_COLORS[0], SOURCE_COLORS[1], SOURCE_COLORS[0], SOURCE_COLORS[2]]
    title = panels.accept_plot.getPlotItem().titleLabel.text
    assert "MTP head" in title and "copies" in title and "DFlash" in title
    panels.stop()


def test_rounds_of_one_drafter_keep_the_runs_colour(qtbot):
    from app.ui.live import LiveRun
    from app.ui.panels import LivePanels

    panels = LivePanels()
    qtbot.addWidget(panels)
    run = LiveRun()
    panels.set_runs([(run, "reply", "#3366cc")])
    run.on_round(0, 3)
    run.on_done()
    panels.refresh(force_labels=True)
    assert run.snapshot().sources == ()
    brush = panels._runs[0].items["accepted"].opts["symbolBrush"]
    assert not isinstance(brush, list)  # one brush: the run's own colour
    panels.stop()


def test_the_next_reply_drops_the_sources_legend(qtbot):
    from app.ui.live import LiveRun
    from app.ui.panels import ACCEPT_TITLE, LivePanels

    panels = LivePanels()
    qtbot.addWidget(panels)
    run = LiveRun()
    panels.set_runs([(run, "reply", "#3366cc")])
    run.on_round(0, 2, "mtp")
    panels.refresh(force_labels=True)
    assert "MTP head" in panels.accept_plot.getPlotItem().titleLabel.text
    panels.set_runs([(LiveRun(), "reply", "#3366cc")])
    assert panels.accept_plot.getPlotItem().titleLabel.text == ACCEPT_TITLE
    panels.stop()


def test_the_stats_line_says_what_auto_did():
    from app.ui.format import stats_line

    line = stats_line({
        "tokens": 40, "tok_s": 5.0, "draft_kind": "auto", "draft_n": 30,
        "draft_n_accepted": 20, "finish_reason": "stop",
        "sources": {"mtp": {"rounds": 6, "drafted": 20, "accepted": 12},
                    "prompt-lookup": {"rounds": 3, "drafted": 10, "accepted": 8},
                    "dflash": {"rounds": 0, "drafted": 0, "accepted": 0},
                    "plain": {"rounds": 1}}})
    assert "Automatic (MTP head 60% of rounds, copies 30%, plain 10%)" in line
