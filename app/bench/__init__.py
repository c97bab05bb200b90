"""Benchmark: which drafter pays on which task, measured honestly.

Public API (for the CLI and the GUI's Bench view; run it on the thread that owns MLX)::

    from app.bench import BenchConfig, run_bench, write_report, recommend_drafters

    config = BenchConfig(runs=3)                       # or BenchConfig.quick_preset()
    report = run_bench(config, progress=on_progress, cancel=stop_event)
    write_report(report, "bench-out")                  # report.json, runs.csv, report.md,
                                                       # speedup.png
    recs = recommend_drafters(report)                  # task kind -> Recommendation

- ``BenchConfig``: model/draft, kinds (None = all the pair supports), runs, temperatures,
  per-kind widths, task ids, ``quick``, contention threshold and re-runs.
- ``run_bench(config, *, progress, cancel, session=None) -> BenchReport``: ``progress``
  receives ``Progress(done, total, message)`` (``.fraction`` for a progress bar); ``cancel``
  is a ``threading.Event``; pass a loaded ``Session`` to reuse the GUI's models.
- ``BenchReport``: ``runs`` (raw ``RunRecord``s with the engine's full timings),
  ``summary`` (plain dict: ``rows`` task x condition x temperature with speedup, verdict,
  accepted/round, tokens/verify, identity; ``peer_rows``; ``identity``; ``goals``;
  ``contention``), ``environment``, ``to_dict()``.
- ``render_speedup_chart(summary) -> bytes`` (PNG) for the view, ``markdown(report)``.
- ``recommend_drafters(report, temperature=0.0) -> {task_kind: Recommendation}``.

Modules: ``suite`` (task files), ``records`` (what a run records), ``runner`` (the method), ``stats`` (verdict rule, identity),
``summary``, ``peers`` (mlx-lm rows), ``contention``, ``environment``, ``report``, ``chart``,
``recommend``. No Qt here; the chart is drawn in pure Python.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BenchConfig",
    "BenchReport",
    "Progress",
    "RunRecord",
    "markdown",
    "recommend_drafters",
    "render_speedup_chart",
    "run_bench",
    "write_report",
]

_LAZY = {
    "BenchConfig": "app.bench.runner",
    "BenchReport": "app.bench.records",
    "Progress": "app.bench.runner",
    "RunRecord": "app.bench.records",
    "run_bench": "app.bench.runner",
    "write_report": "app.bench.report",
    "markdown": "app.bench.report",
    "recommend_drafters": "app.bench.recommend",
    "render_speedup_chart": "app.bench.chart",
}


def __getattr__(name: str) -> Any:  # lazy, so importing app.bench stays cheap
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(module), name)
