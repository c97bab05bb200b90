"""The one set of measurement rules (app.bench.measure) that the benchmark and Compare share:
the plan and its order, the speedup, the contention meter."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from app.bench import measure
from app.bench.contention import ContentionSampler, Window
from app.ui import compare_model
from app.ui.compare_card import card_html
from app.ui.theme import LIGHT


def test_plan_warms_each_condition_then_reverses_every_other_repeat():
    got = [(p.condition, p.repeat, p.warmup) for p in measure.plan("ABC", 3)]
    assert got == [
        ("A", -1, True), ("B", -1, True), ("C", -1, True),
        ("A", 0, False), ("B", 0, False), ("C", 0, False),
        ("C", 1, False), ("B", 1, False), ("A", 1, False),
        ("A", 2, False), ("B", 2, False), ("C", 2, False),
    ]
    assert [p.condition for p in measure.plan("AB", 2, warmup=False)] == ["A", "B", "B", "A"]
    assert measure.plan("AB", 0) == [measure.PlannedRun("A", -1), measure.PlannedRun("B", -1)]


def test_compare_runs_the_benchmarks_plan():
    assert compare_model.plan(3) == measure.plan(("off", "on"), 3)


def test_speedup_is_the_median_of_per_repeat_ratios_with_its_spread():
    s = measure.speedup([20.0, 10.0, 5.0], [10.0, 5.0, 5.0])  # the machine drifts slower
    assert s is not None
    assert s.ratios == (2.0, 2.0, 1.0) and s.median == 2.0 and (s.low, s.high) == (1.0, 2.0)
    assert s.pairs == 3
    # a rate of 0 is no measurement (a remote endpoint that reports none)
    assert measure.speedup([0.0, 30.0], [10.0, 10.0]).ratios == (3.0,)
    assert measure.speedup([0.0], [10.0]) is None and measure.speedup([], []) is None
    with pytest.raises(ValueError):
        measure.speedup([1.0], [1.0, 2.0])


def _done(tps: float, tokens: tuple[int, ...]) -> SimpleNamespace:
    t = SimpleNamespace(predicted_per_second=tps, peak_memory_bytes=100, draft_n_accepted=1,
                        draft_n=2, draft_rounds=1, draft_kind="prompt-lookup", fallback=None)
    return SimpleNamespace(timings=t, token_ids=tokens, text="", finish_reason="length",
                           rounds=())


def test_compare_and_the_bench_give_the_same_speedup():
    off, on = [10.0, 8.0, 12.0, 9.0], [25.0, 12.0, 18.0, 27.0]
    results = []
    for rep, (a, b) in enumerate(zip(off, on, strict=True)):
        results += [compare_model.RunResult("off", rep, _done(a, (1, 2))),
                    compare_model.RunResult("on", rep, _done(b, (1, 2)))]
    s = compare_model.summarize(results)
    assert s is not None
    # per-pair ratios 2.5, 1.5, 1.5, 3.0: the median is 2.0 by hand
    assert s.speedup_median == pytest.approx(2.0) == measure.paired_speedup(on, off)
    assert (s.speedup_min, s.speedup_max) == (1.5, 3.0)


def test_contention_meter_measures_other_processes_in_cores():
    meter = measure.ContentionMeter(threshold_cores=-1.0)  # any load counts as contended
    with pytest.raises(RuntimeError):
        meter.stop()
    meter.start()
    sum(range(200_000))
    got = meter.stop()
    assert got.mean_other_cores >= 0.0 and got.flagged
    calm = measure.ContentionMeter(threshold_cores=1e9)
    calm.start()
    assert not calm.stop().flagged


def test_contention_meter_with_the_bench_sampler_sees_a_busy_window():
    sampler = ContentionSampler(interval_s=60.0, threshold_cores=0.5)  # never samples itself
    meter = measure.ContentionMeter(sampler=sampler)
    assert meter.threshold == 0.5
    meter.start()
    now = time.perf_counter()
    sampler.windows.append(Window(now - 1.0, now + 1.0, 3.0))  # a burst during the run
    got = meter.stop()
    # the run's own mean over a few microseconds is coarse (CPU times tick in 10 ms), so
    # the window is the floor of the peak, not its value
    assert got.flagged and got.peak_other_cores >= 3.0


def test_the_compare_card_warns_only_when_the_measurement_was_flagged():
    results = [compare_model.RunResult("off", 0, _done(10.0, (1,))),
               compare_model.RunResult("on", 0, _done(20.0, (1,)))]
    busy = SimpleNamespace(mean_other_cores=1.7, peak_other_cores=2.0, flagged=True)
    quiet = SimpleNamespace(mean_other_cores=0.1, peak_other_cores=0.2, flagged=False)
    flagged = compare_model.summarize(results, contention=busy)
    assert flagged.other_cores == 1.7 and flagged.contention_flagged
    assert "about 1.7 CPU cores busy" in card_html(flagged, LIGHT, partial=False)
    calm = compare_model.summarize(results, contention=quiet)
    assert "cores busy" not in card_html(calm, LIGHT, partial=False)
    assert "cores busy" not in card_html(compare_model.summarize(results), LIGHT, partial=False)
