"""Plain-Python pieces behind the views: ring buffers, live rates, settings, chat store, compare."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np

from app.bench.stats import compare_tokens
from app.ui.chat_store import ChatStore, to_markdown
from app.ui.compare_model import RunResult, plan, summarize
from app.ui.live import LiveRun, RingBuffer
from app.ui.settings import SCHEMA_VERSION, Settings, SettingsStore


def test_ring_buffer_keeps_the_newest_rows_in_order():
    rb = RingBuffer(2, capacity=4)
    for i in range(10):
        rb.append((i, i * 10))
    v = rb.values()
    assert v[:, 0].tolist() == [6, 7, 8, 9] and len(rb) == 4 and rb.written == 10


def test_rate_is_windowed_not_per_token(monkeypatch):
    import app.ui.live as live

    clock = [100.0]
    monkeypatch.setattr(live.time, "perf_counter", lambda: clock[0])
    run = LiveRun()
    run.on_stage("decoding")
    for _step in range(20):  # bursts of 4 tokens at the same instant, every 0.25 s
        clock[0] += 0.25
        for _ in range(4):
            run.on_token("x", True)
    rates = run.snapshot().rate
    assert np.isfinite(rates[:, 1]).all() and rates[:, 1].max() <= 32  # never 4 tokens / 0 s
    assert abs(rates[-1, 2] - 16.0) < 0.5  # cumulative: 80 tokens in 5 s
    assert run.drain_text()[0].text == "x" * 80 and run.drain_text() == []


def test_settings_migrate_validate_and_save_atomically(tmp_path):
    store = SettingsStore(tmp_path / "settings.json")
    (tmp_path / "settings.json").write_text(json.dumps({
        "schema_version": 1, "speculation": "off", "temperature": "hot", "max_tokens": 10**9,
        "unknown": 1, "theme": "purple",
    }))
    s = store.load()
    assert s.draft_kind == "none" and s.temperature == Settings().temperature
    assert s.max_tokens == 32768 and s.theme == "system"
    s.top_p = 0.5
    store.save(s)
    data = json.loads((tmp_path / "settings.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION and data["top_p"] == 0.5
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".settings-")]
    (tmp_path / "settings.json").write_text("{broken")
    fresh = SettingsStore(tmp_path / "settings.json")
    assert fresh.load() == Settings() and "could not be read" in fresh.problem


def test_chat_store_keeps_partial_replies_after_a_crash(tmp_path):
    db = tmp_path / "c.sqlite3"
    store = ChatStore(db)
    conv = store.create_conversation("Trip", "Be brief.")
    store.add_message(conv, "user", "Hi")
    reply = store.add_message(conv, "assistant", "", status="streaming")
    store.update_message(reply, content="Hel", segments=[("He", True), ("l", False)],
                         status="streaming")
    # no close(): the process "dies" here
    again = ChatStore(db)
    msgs = again.messages(conv)
    assert msgs[-1].content == "Hel" and msgs[-1].status == "interrupted"
    assert msgs[-1].segments == [("He", True), ("l", False)]
    md = to_markdown(again.conversation(conv), msgs)
    assert md.startswith("# Trip") and "**You:**" in md and "Be brief." in md
    again.close()
    store.close()


def _done(tps, tokens, peak=100, kind="prompt-lookup", acc=0, n=0, rounds=0):
    t = SimpleNamespace(predicted_per_second=tps, peak_memory_bytes=peak, draft_n_accepted=acc,
                        draft_n=n, draft_rounds=rounds, draft_kind=kind, fallback=None)
    return SimpleNamespace(timings=t, token_ids=tuple(tokens), finish_reason="length")


def test_compare_summary_medians_spread_identity_and_memory():
    # the benchmark's plan: warm-ups, then each pair in the other order than the one before
    assert [(p.condition, p.warmup) for p in plan(2)] == [
        ("off", True), ("on", True), ("off", False), ("on", False), ("on", False), ("off", False)]
    results = [
        RunResult("off", 0, _done(10, [1, 2, 3], kind="none")),
        RunResult("on", 0, _done(15, [1, 2, 3], peak=300, acc=6, n=8, rounds=2)),
        RunResult("off", 1, _done(10, [1, 2, 3], kind="none")),
        RunResult("on", 1, _done(25, [1, 2, 3], peak=300, acc=6, n=8, rounds=2)),
        RunResult("off", 2, _done(10, [1, 2, 3], kind="none")),
        RunResult("on", 2, _done(20, [1, 2, 3], peak=300, acc=6, n=8, rounds=2)),
    ]
    s = summarize(results)
    assert s.pairs == 3 and s.speedup_median == 2.0 and (s.speedup_min, s.speedup_max) == (1.5, 2.5)
    assert s.identical and s.first_difference is None and s.extra_memory_bytes == 200
    assert s.acceptance == 0.75 and s.accept_len_mean == 3.0
    assert compare_tokens((1, 2, 3), (1, 9, 3)).first_divergence == 1
    assert compare_tokens((1, 2), (1, 2, 3)).first_divergence == 2
    assert summarize(results[:1]) is None


def test_window_modules_import_nothing_heavy():
    import subprocess
    import sys

    code = (
        "import sys, app.ui.main_window, app.ui.app, app.cli.gui; "
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('mlx', 'mlx_lm', 'transformers', 'huggingface_hub', 'tokenizers', 'torch')]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
