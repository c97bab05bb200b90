"""The stats line and the live panels say when rounds were trees and how deep they went."""

from __future__ import annotations

from types import SimpleNamespace


def test_stats_line_counts_tree_rounds():
    from app.engine.events import Timings
    from app.ui.format import reply_stats

    t = Timings(predicted_n=12, predicted_per_second=5.0, ttft_ms=100, prompt_n=10,
                draft_kind="mtp", draft_n=9, draft_n_accepted=6, draft_rounds=3,
                accept_len_mean=2.0, tree_rounds=2, tree_depth_mean=2.5)
    done = SimpleNamespace(finish_reason="stop", timings=t, error=None, text="")
    line = reply_stats(done, "mtp")["line"]
    assert "2 rounds as trees, accepted path 2.50 deep" in line
    chain = reply_stats(SimpleNamespace(finish_reason="stop", timings=Timings(
        predicted_n=3, draft_kind="mtp", draft_n=2, draft_rounds=1), error=None, text=""),
        "mtp")["line"]
    assert "trees" not in chain


def test_live_panel_says_how_deep_tree_paths_went(qtbot):
    from app.ui.live import LiveRun
    from app.ui.panels import LivePanels

    panels = LivePanels()
    qtbot.addWidget(panels)
    run = LiveRun()
    panels.set_runs([(run, "reply", "#3366cc")])
    run.on_round(0, 2)  # a chain
    run.on_round(1, 3, tree_nodes=9)
    run.on_round(2, 1, tree_nodes=7)
    panels.refresh(force_labels=True)
    text = panels.accept_label.text()
    assert "3 rounds" in text and "2 as trees, accepted path 2.00 deep" in text
    assert run.snapshot().trees == (2, 2.0)
    panels.stop()
