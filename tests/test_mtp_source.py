"""Putting back an MTP head a conversion dropped: only the head's bytes from the source
repository (a real HTTP fake Hub, range requests, resume), and ``models convert`` keeping it.

The source is a tiny Qwen3.5 checkpoint in the Hugging Face layout, sharded with an index the
way the Qwen repositories are; the "conversion" is the same model without ``mtp.*`` and a model
card naming its ``base_model``, as mlx-lm writes one.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import mlx.core as mx
import pytest

from app.cli import main
from tests.builders_mtp import make_qwen3_5_checkpoint
from tests.fakehub import FakeHub

SOURCE = "org/q35-source"


def _shard(folder: Path) -> None:
    """Split model.safetensors into two shards with an index; the head sits in the second,
    between other tensors, as in the real repositories."""
    import numpy as np
    from safetensors.numpy import save_file

    w = {k: np.array(v) for k, v in mx.load(str(folder / "model.safetensors")).items()}
    keys = sorted(w)
    first = [k for k in keys if "mtp." not in k][: len(keys) // 2]
    second = [k for k in keys if k not in first]
    names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    for name, part in zip(names, (first, second), strict=True):
        save_file({k: w[k] for k in part}, str(folder / name))  # as transformers writes shards
    (folder / "model.safetensors").unlink()
    wm = {k: names[0] for k in first} | {k: names[1] for k in second}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("mtp-source")
    source = make_qwen3_5_checkpoint(root / "source")
    _shard(source)
    converted = make_qwen3_5_checkpoint(root / "converted", with_mtp=False)
    (converted / "README.md").write_text(
        f"---\nbase_model: {SOURCE}\ntags:\n- mlx\n---\n# converted\n")
    return SimpleNamespace(source=source, converted=converted, root=root)


@pytest.fixture
def hub(models, tmp_path, monkeypatch):
    h = FakeHub()
    h.add_repo(SOURCE, models.source, library="transformers", tags=["safetensors"])
    h.start()
    h.use(monkeypatch, tmp_path)
    yield h
    h.stop()


def _head_of_source(models) -> dict:
    out = {}
    for f in models.source.glob("*.safetensors"):
        out.update({k: v for k, v in mx.load(str(f)).items() if k.startswith("mtp.")})
    return out


def _fresh_copy(models, tmp_path) -> Path:
    import shutil

    dest = tmp_path / "converted"
    shutil.copytree(models.converted, dest)
    return dest


def _ranged_bytes(hub, name: str) -> int:
    total = 0
    for f, rng in hub.ranges:
        if f == name:
            first, _, last = rng[len("bytes="):].partition("-")
            total += int(last) - int(first) + 1
    return total


def _assert_same_head(folder: Path, expected: dict) -> None:
    got = mx.load(str(folder / "mtp" / "model.safetensors"))
    assert set(got) == set(expected)
    for k, v in expected.items():
        assert got[k].dtype == v.dtype and mx.array_equal(got[k], v).item(), k


def test_fetch_takes_only_the_head_bytes_and_the_check_then_works(models, hub, tmp_path,
                                                                  capsys):
    conv = _fresh_copy(models, tmp_path)
    assert main(["check", str(conv), "--kind", "mtp"]) == 3
    out = capsys.readouterr().out
    assert "dropped" in out and f"fetch-mtp {conv}" in out and SOURCE in out

    assert main(["models", "fetch-mtp", str(conv)]) == 0
    _assert_same_head(conv, _head_of_source(models))
    first, second = sorted(p.name for p in models.source.glob("model-*.safetensors"))
    assert hub.count("GET", first) == 0  # the index said the head is not there
    head_bytes = sum(v.nbytes for v in _head_of_source(models).values())
    fetched = _ranged_bytes(hub, second)
    assert head_bytes <= fetched < (models.source / second).stat().st_size
    assert not (conv / "mtp" / ".partial").exists()
    capsys.readouterr()

    assert main(["check", str(conv), "--kind", "mtp"]) == 0
    assert "kept beside it" in capsys.readouterr().out
    assert main(["models", "fetch-mtp", str(conv)]) == 0  # nothing left to do
    assert "already has its MTP head" in capsys.readouterr().err


def test_restored_head_drafts_what_the_source_head_drafts(models, hub, tmp_path, monkeypatch):
    """Same proposals as the head inside the source's own files: same accepted counts."""
    from app.engine.events import DoneEvent, GenerationRequest
    from app.engine.session import Session
    from app.engine.width import FixedWidth

    # the width follows measured timings; fixed, both runs draft the same number of tokens

    conv = _fresh_copy(models, tmp_path)
    assert main(["models", "fetch-mtp", str(conv)]) == 0
    source_local = tmp_path / "source-one-file"
    make_qwen3_5_checkpoint(source_local)
    runs = []
    for folder in (source_local, conv):
        s = Session(width_policy=FixedWidth)
        s.load_target(folder)
        req = dict(prompt_tokens=(5, 17, 42, 99, 7, 150), max_tokens=20, chat=False)
        plain = list(s.generate(GenerationRequest(draft_kind="none", **req)))[-1]
        spec = list(s.generate(GenerationRequest(draft_kind="mtp", allow_fallback=False,
                                                 **req)))[-1]
        assert isinstance(spec, DoneEvent) and spec.finish_reason != "error", spec.error
        assert spec.token_ids == plain.token_ids and spec.timings.fallback is None
        runs.append((spec.token_ids, spec.timings.draft_n, spec.timings.draft_n_accepted))
    assert runs[0] == runs[1] and runs[0][1] > 0


def test_fetch_resumes_after_the_connection_drops(models, hub, tmp_path, capsys):
    conv = _fresh_copy(models, tmp_path)
    second = sorted(p.name for p in models.source.glob("model-*.safetensors"))[1]
    hub.die_on = (second, 20_000)  # only the head's bytes are that long
    port = hub.port
    code = main(["models", "fetch-mtp", str(conv)])
    err = capsys.readouterr().err
    assert code != 0 and "connection" in err.lower() and "resume" in err
    assert "Traceback" not in err
    (part,) = (conv / "mtp" / ".partial").glob(f"{second}.*.part")
    assert part.stat().st_size == 20_000
    assert not (conv / "mtp" / "model.safetensors").exists()
    hub.start(port=port)
    before = len(hub.ranges)
    assert main(["models", "fetch-mtp", str(conv)]) == 0

    def starts(ranges):  # the data range is the last one asked of the shard (after its header)
        return [int(r[len("bytes="):].split("-")[0]) for f, r in ranges if f == second]

    assert starts(hub.ranges[before:])[-1] == starts(hub.ranges[:before])[-1] + 20_000
    _assert_same_head(conv, _head_of_source(models))


def test_fetch_needs_a_source_and_says_so(models, hub, tmp_path, capsys):
    conv = _fresh_copy(models, tmp_path)
    (conv / "README.md").unlink()
    assert main(["models", "fetch-mtp", str(conv)]) != 0
    assert "--from" in capsys.readouterr().err
    assert main(["models", "fetch-mtp", str(conv), "--from", "org/nope"]) != 0
    assert "not found" in capsys.readouterr().err
    assert not (conv / "mtp" / "model.safetensors").exists()


def test_convert_keeps_the_head(models, tmp_path, capsys):
    out = tmp_path / "converted-mlx"
    assert main(["models", "convert", str(models.source), "--out", str(out)]) == 0
    assert "multi-token-prediction head" in capsys.readouterr().err
    _assert_same_head(out, _head_of_source(models))
    assert main(["check", str(out), "--kind", "mtp"]) == 0
