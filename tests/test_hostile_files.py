"""Files from elsewhere, made by an attacker or damaged by bad luck: every count and length in
a header is bounded by the file's size, special files (pipes, devices) are never opened for
reading, and each refusal is one plain sentence naming the file."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON_WORDS = re.compile(r"Error\b|Exception|Traceback|\(ValueError\)|\(IndexError\)|"
                          r"__\w+__|NoneType|positional argument")


def _plain(text: str) -> None:
    assert text and "\n" not in text and text.rstrip().endswith("."), text
    assert not PYTHON_WORDS.search(text), text


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "DRAFTPAIR_DATA_DIR": str(tmp_path / "data"),
            "HF_HOME": str(tmp_path / "hf"), "HOME": str(tmp_path / "home"),
            "DRAFTPAIR_NO_BLAS_FIX": "1"}


def _string(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def test_a_tiny_gguf_declaring_a_huge_array_is_refused_at_once(tmp_path):
    head = (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string(b"tokenizer.ggml.tokens")
            + struct.pack("<IIQ", 9, 8, 1 << 40))
    path = tmp_path / "big.gguf"
    path.write_bytes(head + b"\0" * (84 - len(head)))
    proc = subprocess.run([sys.executable, "-m", "app", "models", "import", str(path)],
                          env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.strip().splitlines()[-1].removeprefix("draftpair: error: ")
    assert line.startswith("big.gguf cannot be read as GGUF: its header declares "
                           "1,099,511,627,776 items in 'tokenizer.ggml.tokens'"), line
    _plain(line)


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    from tests.gguf_files import write_gguf

    files, _, _ = write_gguf(tmp_path_factory.mktemp("gguf") / "whole.gguf")
    return files[0]


def test_truncated_ggufs_give_one_plain_sentence(gguf_file, tmp_path, monkeypatch):
    from app.checkpoints.gguf_import import GGUFImportError, import_gguf
    from app.checkpoints.store import Store

    monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(tmp_path / "data"))
    store = Store(data_dir=tmp_path / "data")
    data = gguf_file.read_bytes()
    cuts = sorted({*range(4, 400, 13), *range(400, len(data) - 1, max(len(data) // 40, 1))})
    for cut in cuts:
        part = tmp_path / "cut.gguf"
        part.write_bytes(data[:cut])
        with pytest.raises(GGUFImportError) as caught:
            import_gguf(part, store=store)
        text = str(caught.value)
        _plain(text)
        assert "cut.gguf" in text or "not a GGUF file" in text, text
    assert not list((tmp_path / "data" / "models").glob("*")) if (
        tmp_path / "data" / "models").exists() else True


def test_damaged_tokenizer_metadata_is_named(tmp_path):
    from app.checkpoints.gguf_tokenizer import GGUFTokenizerError, build_tokenizer_files

    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b"],
            "tokenizer.ggml.token_type": [1, 1, 3], "tokenizer.ggml.merges": ["a b"]}
    with pytest.raises(GGUFTokenizerError, match="lists 3 token types for 2 tokens"):
        build_tokenizer_files(meta, tmp_path / "t", context_length=None)
    meta["tokenizer.ggml.token_type"] = [1, 1]
    meta["tokenizer.ggml.merges"] = [7]
    with pytest.raises(GGUFTokenizerError, match="merges are not pairs of texts"):
        build_tokenizer_files(meta, tmp_path / "t", context_length=None)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.builders import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("tiny") / "tiny", seed=4)


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "tokenizer_config.json",
                                  "chat_template.jinja", "model.safetensors"])
def test_a_pipe_in_a_model_folder_never_hangs(tiny, tmp_path, name):
    folder = tmp_path / "piped"
    shutil.copytree(tiny, folder)
    (folder / name).unlink(missing_ok=True)
    os.mkfifo(folder / name)
    for command in (["check", str(folder)],
                    ["generate", "--model", str(folder), "--prompt", "hi", "--max-tokens", "1"]):
        proc = subprocess.run([sys.executable, "-m", "app", *command], env=_env(tmp_path),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode in (1, 3), (command, proc.stdout, proc.stderr)
        said = proc.stdout + proc.stderr
        assert re.search(rf"{re.escape(name)} (in (the target folder|{re.escape(str(folder))}) )?"
                         r"is a pipe, not an ordinary file", said), said


def test_a_device_posing_as_a_file_is_refused(tiny, tmp_path):
    from app.checkpoints.pairing.load_check import load_check
    from app.engine.models import load_model
    from app.errors import ModelLoadError

    folder = tmp_path / "device"
    shutil.copytree(tiny, folder)
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").symlink_to("/dev/zero")
    blockers = [f.message for f in load_check(folder, tokenizer="files") if f.severity == "blocker"]
    assert any("tokenizer.json in" in m and "is a device" in m for m in blockers), blockers
    with pytest.raises(ModelLoadError, match="tokenizer.json in .* is a device"):
        load_model(folder)


BAD_SETTINGS = [
    ({"num_hidden_layers": -1}, "num_hidden_layers is -1, but it must be a whole number from 1"),
    ({"num_attention_heads": 0}, "num_attention_heads is 0, but it must be a whole number from 1"),
    ({"hidden_size": 10**12}, "hidden_size is 1,000,000,000,000, but it must be a whole number"),
    ({"intermediate_size": 1e12}, "intermediate_size is 1000000000000.0, but it must be a whole"),
    ({"vocab_size": 0}, "vocab_size is 0, but it must be a whole number from 1"),
    ({"eos_token_id": 10**9}, "eos_token_id is 1,000,000,000, but token ids run from 0 to"),
    ({"eos_token_id": [2, -3]}, "eos_token_id is -3, but token ids run from 0 to"),
    ({"num_key_value_heads": 3}, "num_attention_heads is 4 and num_key_value_heads is 3, but"),
    ({"rms_norm_eps": -1}, "rms_norm_eps is -1, but it must be a positive number"),
    ({"rope_theta": float("nan")}, "rope_theta is nan, but it must be a positive number"),
]


@pytest.mark.parametrize("change,said", BAD_SETTINGS, ids=[next(iter(c)) + str(i) for i, (c, _)
                                                            in enumerate(BAD_SETTINGS)])
def test_settings_out_of_range_are_refused_before_a_model_is_built(tiny, tmp_path, change, said):
    import json

    from app.checkpoints.pairing import check
    from app.checkpoints.pairing.load_check import load_check, with_load_check
    from app.engine.models import load_model
    from app.errors import ModelLoadError

    folder = tmp_path / "bad"
    shutil.copytree(tiny, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(change)
    (folder / "config.json").write_text(json.dumps(cfg, allow_nan=True))
    report = with_load_check(check(folder, None))
    assert not report.works
    blockers = [f.message for f in report.findings if f.severity == "blocker"]
    assert any(said in m for m in blockers), blockers
    for m in blockers:
        _plain(m)
    assert [f.message for f in load_check(folder) if said in f.message]
    with pytest.raises(ModelLoadError) as caught:
        load_model(folder)
    assert said in str(caught.value)
    _plain(str(caught.value))


def test_a_tokenizer_that_needs_its_own_code_is_not_called_damaged(tiny, tmp_path):
    import json

    from app.checkpoints.pairing import check
    from app.engine.models import load_model
    from app.errors import ModelLoadError

    folder = tmp_path / "remote"
    shutil.copytree(tiny, folder)
    (folder / "tokenizer.json").unlink()
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg.update(tokenizer_class="FooTokenizer",
               auto_map={"AutoTokenizer": ["tokenization_foo.FooTokenizer", None]})
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    marker = tmp_path / "ran"
    (folder / "tokenization_foo.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    messages = [f.message for f in check(folder, None).findings if f.severity == "blocker"]
    said = "tokenizer needs its own Python code (tokenization_foo.FooTokenizer), which DraftPair"
    assert any(said in m for m in messages) and not any("damaged" in m for m in messages), messages
    with pytest.raises(ModelLoadError, match="needs its own Python code"):
        load_model(folder)
    assert not marker.exists()


@pytest.mark.parametrize("name", ["../../X", "/tmp/elsewhere", "a/b", "..", ".hidden", "",
                                  "tab\there", "c:d"])
def test_import_name_is_a_name_never_a_path(tiny, tmp_path, monkeypatch, capsys, name):
    from app.checkpoints.store import Store, StoreError
    from app.cli import main

    data = tmp_path / "data"
    monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(data))
    before = set(tmp_path.rglob("*"))
    assert main(["models", "import", str(tiny), "--name", name, "--copy"]) == 2
    said = capsys.readouterr().err.strip().removeprefix("draftpair: error: ")
    assert said.endswith("cannot be a model's name: a name is one word or phrase without "
                         "slashes, colons or a leading dot, never a path."), said
    with pytest.raises(StoreError, match="never a path"):
        Store(data_dir=data).import_folder(tiny, name=name, copy=True)
    assert set(tmp_path.rglob("*")) - before <= {data, *data.rglob("*")}
    assert not (data / "models").exists() or not any((data / "models").iterdir())


def test_gguf_import_name_is_a_name_never_a_path(gguf_file, tmp_path):
    from app.checkpoints.gguf_import import import_gguf
    from app.checkpoints.store import Store, StoreError

    store = Store(data_dir=tmp_path / "data")
    with pytest.raises(StoreError, match="never a path"):
        import_gguf(gguf_file, store=store, name="../../escaped")
    assert not (tmp_path / "escaped").exists() and not (tmp_path.parent / "escaped").exists()
