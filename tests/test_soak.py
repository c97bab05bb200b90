"""A short soak run on a tiny model pair: randomized requests, nothing may break."""

from __future__ import annotations

import json

import pytest

from app.bench.soak import SoakConfig, run_soak
from app.cli import main


@pytest.fixture(autouse=True)
def _no_reexec(monkeypatch):
    """``main`` may re-execute itself for the BLAS fix; never the test process."""
    monkeypatch.setenv("DRAFTPAIR_NO_BLAS_FIX", "1")



def test_short_soak_finds_nothing(tiny_models):
    from app.engine.session import Session

    s = Session()
    s.load_target(tiny_models.target)
    s.load_draft(tiny_models.draft)
    r = run_soak(s, SoakConfig(requests=24, seed=1, max_tokens=16, cancel_rate=0.25,
                               invalid_rate=0.15))
    assert r.ok, r.format_text()
    assert r.requests == 24 and r.refused >= 1 and r.greedy_compared >= 1
    assert {"full-model", "prompt-lookup"} & set(r.kinds)
    assert "cancelled" in r.finish and r.memory["rss_end"] > 0


def test_soak_cli(tiny_models, capsys):
    code = main(["soak", "--model", str(tiny_models.target), "--draft-model",
                 str(tiny_models.draft), "-n", "6", "--max-tokens", "8", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"] and out["requests"] == 6


def test_server_soak_with_hostile_requests_finds_nothing(tiny_models, capsys):
    """60 requests to a real server process, half of them hostile, with idle and slow
    connections beside them: no crash, no hang, no 5xx, every valid request answered."""
    code = main(["soak", "--server", "--model", str(tiny_models.target), "--draft-model",
                 str(tiny_models.draft), "-n", "60", "--seed", "3", "--idle-connections", "12",
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"], out
    assert out["requests"] == 60 and not out["crashes"] and not out["hangs"]
    assert not out["server_errors"] and not out["wrong"] and out["log_tracebacks"] == 0
    assert out["valid"] >= 15 and out["valid_answered"] == out["valid"]
    assert out["hostile_refused"] == 60 - out["valid"] and len(out["families"]) >= 6
    assert out["idle_closed_by_server"] > 0 and out["slow_closed_by_server"] > 0
    assert out["exit_code"] == 130  # it ended on Ctrl+C, not on its own
    assert out["rss_mib"]["max"] >= out["rss_mib"]["start"] > 0
    # earlier replies kept per key and conversation: reported each tenth, never over the cap
    memory = out["reply_memory"]
    assert len(memory) == 10 and all(0 <= m["bytes"] <= m["cap_bytes"] for m in memory)
    assert memory[-1]["cap_bytes"] == int(0.25 * 2**20)
