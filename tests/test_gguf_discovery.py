"""Discovery of GGUF models in LM Studio, Ollama, llama.cpp and HF-cache folders (fake trees,
real layouts: Ollama manifest JSON as `ollama pull` writes it, real GGUF files as blobs)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.gguf_files import write_gguf


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ggufs")
    chat = write_gguf(root / "Tiny-Chat-Q8_0.gguf", default_qtype="Q8_0")[0][0]
    base = write_gguf(root / "tiny-base.gguf", chat_template=None)[0][0]
    split = write_gguf(root / "Tiny-Split.gguf", split_max_tensors=8)[0]
    return chat, base, split


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(h / ".cache" / "huggingface"))
    monkeypatch.setenv("DRAFTPAIR_NO_BLAS_FIX", "1")
    for var in ("HF_HUB_CACHE", "OLLAMA_MODELS", "LLAMA_CACHE", "DRAFTPAIR_LMSTUDIO_MODELS",
                "XDG_CACHE_HOME"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    return h


def ollama_pull(models: Path, name: str, tag: str, gguf: Path) -> Path:
    """Lay out a model the way `ollama pull` does: blobs by digest + a registry manifest."""
    blobs = models / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    layers = []
    for media, data in (
        ("application/vnd.ollama.image.model", gguf.read_bytes()),
        ("application/vnd.ollama.image.template", b"{{ .Prompt }}"),
        ("application/vnd.ollama.image.params", b'{"stop": ["<|im_end|>"]}'),
    ):
        digest = hashlib.sha256(data).hexdigest()
        (blobs / f"sha256-{digest}").write_bytes(data)
        layers.append({"mediaType": media, "digest": f"sha256:{digest}", "size": len(data)})
    config = b'{"model_format":"gguf","model_family":"llama"}'
    cdigest = hashlib.sha256(config).hexdigest()
    (blobs / f"sha256-{cdigest}").write_bytes(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": f"sha256:{cdigest}", "size": len(config)},
        "layers": layers,
    }  # fmt: skip
    path = models / "manifests" / "registry.ollama.ai" / "library" / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return blobs / layers[0]["digest"].replace(":", "-")


def build_library(home: Path, ggufs) -> dict:
    chat, base, split = ggufs
    lm = home / ".lmstudio" / "models" / "someone" / "Tiny-GGUF"
    lm.mkdir(parents=True)
    shutil.copy(chat, lm / chat.name)
    for part in split:
        shutil.copy(part, lm / part.name)
    (lm / "mmproj-tiny-f16.gguf").write_bytes(chat.read_bytes())  # a vision projector: skipped
    blob = ollama_pull(home / ".ollama" / "models", "tiny", "latest", chat)
    broken = home / ".ollama" / "models" / "manifests" / "registry.ollama.ai" / "library" / "gone"
    broken.mkdir(parents=True)
    (broken / "1b").write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "layers": [
                    {
                        "mediaType": "application/vnd.ollama.image.model",
                        "digest": "sha256:" + "0" * 64,
                    }
                ],
            }
        )
    )
    cpp = home / ".cache" / "llama.cpp"
    cpp.mkdir(parents=True)
    shutil.copy(base, cpp / "someone_tiny-base-GGUF_tiny-base.gguf")
    hf = home / ".cache" / "huggingface" / "hub" / "models--someone--Tiny-GGUF"
    snap = hf / "snapshots" / ("b" * 40)
    (hf / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    shutil.copy(chat, hf / "blobs" / "deadbeef")
    os.symlink(hf / "blobs" / "deadbeef", snap / "tiny-chat-q8_0.gguf")
    (hf / "refs").mkdir()
    (hf / "refs" / "main").write_text("b" * 40)
    return {"blob": blob}


def test_discover_finds_each_library(home, ggufs):
    from app.checkpoints.discovery import HF_CACHE, LLAMA_CPP, LMSTUDIO, OLLAMA, discover

    made = build_library(home, ggufs)
    found = {f.id: f for f in discover()}
    assert set(found) == {
        "lmstudio:someone/Tiny-GGUF/Tiny-Chat-Q8_0.gguf",
        "lmstudio:someone/Tiny-GGUF/Tiny-Split-00001-of-00003.gguf",
        "ollama:tiny:latest",
        "ollama:gone:1b",
        "llama.cpp:someone_tiny-base-GGUF_tiny-base.gguf",
        "hf:someone/Tiny-GGUF/tiny-chat-q8_0.gguf",
    }, sorted(found)
    lm = found["lmstudio:someone/Tiny-GGUF/Tiny-Chat-Q8_0.gguf"]
    assert lm.where == LMSTUDIO and lm.architecture == "llama" and lm.supported
    assert lm.quantization is None or isinstance(lm.quantization, str)
    assert lm.has_chat_template and lm.size_bytes == ggufs[0].stat().st_size
    split = found["lmstudio:someone/Tiny-GGUF/Tiny-Split-00001-of-00003.gguf"]
    assert len(split.files) == 3 and split.size_bytes == sum(p.stat().st_size for p in ggufs[2])
    ol = found["ollama:tiny:latest"]
    assert ol.where == OLLAMA and ol.path == made["blob"] and ol.supported
    assert not found["ollama:gone:1b"].supported and "missing" in found["ollama:gone:1b"].reason
    cpp = found["llama.cpp:someone_tiny-base-GGUF_tiny-base.gguf"]
    assert cpp.where == LLAMA_CPP and not cpp.has_chat_template
    assert found["hf:someone/Tiny-GGUF/tiny-chat-q8_0.gguf"].where == HF_CACHE


def test_roots_follow_the_apps_own_variables(home, ggufs, tmp_path, monkeypatch):
    from app.checkpoints.discovery import LLAMA_CPP, LMSTUDIO, OLLAMA, discover, discovery_roots

    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ol"))
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "cpp"))
    monkeypatch.setenv("DRAFTPAIR_LMSTUDIO_MODELS", str(tmp_path / "lm"))
    roots = discovery_roots()
    assert roots[OLLAMA] == [tmp_path / "ol"] and roots[LLAMA_CPP] == [tmp_path / "cpp"]
    assert roots[LMSTUDIO] == [tmp_path / "lm"]
    ollama_pull(tmp_path / "ol", "other", "q8", ggufs[0])
    assert [f.id for f in discover()] == ["ollama:other:q8"]
    assert [f.id for f in discover({OLLAMA: [tmp_path / "nowhere"]})] == []


def test_cli_lists_and_imports_found_models_in_place(home, ggufs, capsys):
    from app.checkpoints.gguf_import import converted_from
    from app.checkpoints.store import Store
    from app.cli import main

    made = build_library(home, ggufs)
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "Found elsewhere" in out and "ollama:tiny:latest" in out and "LM Studio" in out
    assert "why unsupported: Its model blob is missing" in out
    assert main(["models", "import", "ollama:tiny:latest", "--precision", "float32"]) == 0
    out = capsys.readouterr().out
    assert "Imported tiny-latest (chat model)" in out and "not copied" in out
    assert main(["models", "list"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("tiny-latest"))
    assert line.endswith("gguf (Ollama)")
    entry = Store().get("tiny-latest")
    rec = converted_from(entry.path)
    assert rec["source_files"] == [str(made["blob"])] and rec["found_in"] == "Ollama"
    assert not any(p.stat().st_size >= made["blob"].stat().st_size // 2
                   and p.read_bytes()[:4] == b"GGUF" for p in entry.path.iterdir())  # fmt: skip
    assert main(["models", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    found = {r["id"]: r for r in rows if r.get("source") == "found"}
    mine = next(r for r in rows if r.get("name") == "tiny-latest")
    assert mine["converted_from"]["found_in"] == "Ollama" and mine["kind"] == "chat"
    assert found["ollama:tiny:latest"]["imported_as"] == "tiny-latest"
    assert main(["models", "import", "ollama:gone:1b"]) == 1
    assert "missing" in capsys.readouterr().err
    assert main(["models", "import", "ollama:nothing:here"]) == 2
    first = "lmstudio:someone/Tiny-GGUF/Tiny-Split-00001-of-00003.gguf"
    assert main(["models", "import", first, "--precision", "float32"]) == 0
    assert Store().get("Tiny-Split") is not None
