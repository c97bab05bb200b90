"""One table of exit codes (``draftpair --help`` and the README), used by every command; with
``--json`` an error is JSON on stdout too; Ctrl+C (a real SIGINT to a real process) stops
generate within one prompt chunk, and bench and soak too, with exit code 130."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.cli import (
    EXIT_CODES,
    EXIT_ERROR,
    EXIT_FOUND_PROBLEMS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    main,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_is_in_help_and_in_the_readme(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for code in (EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_FOUND_PROBLEMS, EXIT_INTERRUPTED):
        assert re.search(rf"^\s+{code}\s+\w", out, re.M), (code, out)
        assert re.search(rf"^\| `?{code}`? \|", readme, re.M), f"README lacks exit code {code}"
    assert EXIT_CODES.splitlines()[0] in out


def _json_error(out: str, code: int) -> str:
    data = json.loads(out.strip().splitlines()[-1])
    assert data["error"]["exit_code"] == code
    return data["error"]["message"]


@pytest.mark.parametrize("argv,code", [
    (["check", "/nowhere/at/all", "--json"], EXIT_USAGE),  # an unknown model name
    (["check", "x", "--kind", "bogus", "--json"], EXIT_USAGE),  # refused by the parser
    (["generate", "--model", "/nowhere/at/all", "--prompt", "hi", "--json"], EXIT_ERROR),
    (["models", "import", "/tmp", "--name", "../../x", "--json"], EXIT_USAGE),
    (["soak", "--requests", "0", "--json"], EXIT_USAGE),
])
def test_with_json_an_error_is_json_on_stdout(argv, code, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(tmp_path / "data"))
    assert main(argv) == code
    out, err = capsys.readouterr()
    message = _json_error(out, code)
    assert message and err.startswith("draftpair: error: ") and message in err


def test_check_that_finds_a_fault_is_3_and_soak_uses_the_same_code(tiny_models, tmp_path):
    from app.cli.soak import _exit_code

    assert EXIT_FOUND_PROBLEMS == 3
    fake = type("R", (), {"ok": False, "interrupted": False})()
    assert _exit_code(fake) == 3
    fake.interrupted = True
    assert _exit_code(fake) == EXIT_INTERRUPTED


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory):
    """Big enough that reading a long prompt takes many chunks on any machine."""
    from tests.builders import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("slow") / "slow", hidden_size=256,
                           num_layers=4, num_heads=4, num_kv_heads=4, intermediate_size=512,
                           max_position_embeddings=65536, seed=9)


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "DRAFTPAIR_DATA_DIR": str(tmp_path / "data"),
            "PYTHONUNBUFFERED": "1"}


def _interrupt_when(proc: subprocess.Popen, marker: str, lines: list[str],
                    timeout_s: float = 300) -> None:
    """Reads stderr until ``marker`` shows, then sends SIGINT (Ctrl+C); keeps reading."""

    def read() -> None:
        sent = False
        for line in proc.stderr:  # type: ignore[union-attr]
            lines.append(line)
            if not sent and marker in line:
                proc.send_signal(signal.SIGINT)
                sent = True

    t = threading.Thread(target=read, daemon=True)
    t.start()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()  # not left running after the test
        raise
    t.join(10)


def test_ctrl_c_stops_generate_within_the_prompt(slow_model, tmp_path):
    words = ("the cat sat on the mat and the dog sat on the log while numbers ran 0 1 2 3 "
             "4 5 6 7 8 9 ")
    prompt = tmp_path / "long.txt"
    prompt.write_text(words * 600)  # about 30,000 tokens
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "generate", "--model", str(slow_model), "--prompt-file",
         str(prompt), "--raw", "--max-tokens", "4", "-v"],
        env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT)
    lines: list[str] = []
    _interrupt_when(proc, "reading the prompt:", lines)
    text = "".join(lines)
    assert proc.returncode == EXIT_INTERRUPTED, text
    assert "stopping" in text and "Traceback" not in text
    read = [tuple(int(x.replace(",", "")) for x in m.groups())
            for m in re.finditer(r"reading the prompt: ([\d,]+)/([\d,]+) tokens", text)]
    assert read and read[-1][0] < read[-1][1], read  # it did not read the whole prompt


def test_ctrl_c_stops_a_soak_with_130(tiny_models, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "soak", "--model", str(tiny_models.target),
         "--draft-model", str(tiny_models.draft), "-n", "100000", "--max-tokens", "4", "-v"],
        env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT)
    lines: list[str] = []
    _interrupt_when(proc, "[50/", lines)
    assert proc.returncode == EXIT_INTERRUPTED, "".join(lines)
    assert "interrupted" in proc.stdout.read()  # type: ignore[union-attr]


def test_ctrl_c_stops_a_command_started_with_it_ignored(tiny_models, tmp_path):
    """A background job of a script starts with SIGINT ignored, and so would the processes
    DraftPair starts and stops with it: the command still hears Ctrl+C."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "soak", "--model", str(tiny_models.target),
         "--draft-model", str(tiny_models.draft), "-n", "100000", "--max-tokens", "4", "-v"],
        env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    lines: list[str] = []
    _interrupt_when(proc, "[50/", lines, timeout_s=60)
    assert proc.returncode == EXIT_INTERRUPTED, "".join(lines)


def test_ctrl_c_stops_a_bench_with_what_it_measured(slow_model, tmp_path):
    out = tmp_path / "bench-out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "bench", "--model", str(slow_model), "--kinds",
         "prompt-lookup", "--runs", "3", "--max-tokens", "16", "--no-peers", "--out", str(out)],
        env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT)
    lines: list[str] = []
    _interrupt_when(proc, "/", lines)  # the first progress line: "[  1/N] ..."
    said = proc.stdout.read()  # type: ignore[union-attr]
    assert proc.returncode == EXIT_INTERRUPTED, "".join(lines) + said
    assert "stopping" in "".join(lines) and "stopped with Ctrl+C" in said
    assert "Traceback" not in "".join(lines)
