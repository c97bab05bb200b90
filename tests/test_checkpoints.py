"""Store, resolver, kinds, convert and the CLI (`draftpair models`, `draftpair check`)."""

from __future__ import annotations

import json
import shutil

import pytest

from app.checkpoints.inspect import (
    KIND_CHAT,
    KIND_DFLASH,
    KIND_DRAFT,
    KIND_MTP_TARGET,
    KIND_UNSUPPORTED,
    inspect_checkpoint,
)
from app.checkpoints.store import SOURCE_BUILTIN, SOURCE_HF, SOURCE_IMPORTED, SOURCE_MODELS, Store
from app.cli import main
from app.errors import ModelLoadError
from tests.test_checkpoints_builders import standard_checkpoints


@pytest.fixture(scope="session")
def ckpts(tmp_path_factory):
    return standard_checkpoints(tmp_path_factory.mktemp("ckpts"))


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DRAFTPAIR_NO_BLAS_FIX", "1")  # never re-exec the test process
    # models found in other apps' folders (LM Studio, Ollama, llama.cpp) stay out of the listing
    for var, sub in (("DRAFTPAIR_LMSTUDIO_MODELS", "lmstudio"), ("OLLAMA_MODELS", "ollama"),
                     ("LLAMA_CACHE", "llama.cpp")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    return tmp_path


def fake_hf_cache(cache, repo_id, folder, sha="a" * 40):
    """Lay a folder out exactly like huggingface_hub's cache (blobs + snapshot symlinks + ref)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / sha
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    for f in folder.iterdir():
        blob = repo / "blobs" / (f.name + ".blob")
        shutil.copy(f, blob)
        (snap / f.name).symlink_to(blob)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(sha)
    return snap


def test_kinds(ckpts):
    assert inspect_checkpoint(ckpts.target).kind == KIND_CHAT
    assert inspect_checkpoint(ckpts.dflash).kind == KIND_DFLASH
    assert inspect_checkpoint(ckpts.dflash_new).kind == KIND_DFLASH
    assert inspect_checkpoint(ckpts.mtp_target).kind == KIND_MTP_TARGET
    assert inspect_checkpoint(ckpts.head_draft).kind == KIND_DRAFT
    for name in ("truncated", "bad_header", "garbled_config"):
        info = inspect_checkpoint(getattr(ckpts, name))
        assert info.kind == KIND_UNSUPPORTED and info.unsupported_reason.endswith(".")
    info = inspect_checkpoint(ckpts.target)
    assert info.param_count and info.vocab_size == 320 and info.context_length == 2048
    assert info.has_chat_template and info.dtype == "float32" and info.arch_supported


def test_store_lists_hf_cache_models_folder_and_imports(ckpts, env):
    store = Store()
    cache = env / "hf" / "hub"
    fake_hf_cache(cache, "org/tiny-target", ckpts.target)
    shutil.copytree(ckpts.draft, store.models_dir / "my-draft")
    store.import_folder(ckpts.dflash, name="dflash-x")
    entries = {e.name: e for e in store.list()}
    assert (
        entries["org/tiny-target"].source == SOURCE_HF
        and entries["org/tiny-target"].kind == KIND_CHAT
    )
    assert entries["org/tiny-target"].size_bytes > 0
    assert entries["my-draft"].source == SOURCE_MODELS
    assert entries["dflash-x"].source == SOURCE_IMPORTED and entries["dflash-x"].kind == KIND_DFLASH
    d = entries["my-draft"].to_dict()
    assert d["param_count"] and d["vocab_size"] == 320 and d["architecture"] == "LlamaForCausalLM"
    json.dumps([e.to_dict() for e in entries.values()])
    # registry is valid JSON written atomically (no temp files left behind)
    reg = json.loads(store.registry_path.read_text())
    assert reg["version"] == 1 and reg["imported"][0]["name"] == "dflash-x"
    assert [p.name for p in store.registry_path.parent.iterdir() if p.suffix == ".tmp"] == []
    # remove: imported -> forgotten, folder kept; models folder / HF cache -> deleted, bytes freed
    r = store.remove("dflash-x")
    assert not r.deleted and ckpts.dflash.exists() and r.freed_bytes == 0
    r = store.remove("my-draft")
    assert r.deleted and r.freed_bytes > 0 and not (store.models_dir / "my-draft").exists()
    r = store.remove("org/tiny-target")
    assert r.deleted and r.freed_bytes > 0
    assert [e for e in store.list() if e.source != SOURCE_BUILTIN] == []


def test_import_errors(ckpts, env, tmp_path):
    from app.checkpoints.store import StoreError

    store = Store()
    with pytest.raises(StoreError, match="not a folder"):
        store.import_folder(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(StoreError, match="no config.json"):
        store.import_folder(empty)
    store.import_folder(ckpts.draft)
    with pytest.raises(StoreError, match="already imported"):
        store.import_folder(ckpts.draft)
    copied = store.import_folder(ckpts.target, name="copied", copy=True)
    assert copied.path.parent == store.models_dir and (copied.path / "model.safetensors").exists()


def test_resolve_model(ckpts, env):
    from app.checkpoints.resolve import resolve_model

    assert resolve_model(str(ckpts.target)) == ckpts.target
    snap = fake_hf_cache(env / "hf" / "hub", "org/cached", ckpts.draft)
    assert resolve_model("org/cached") == snap
    store = Store()
    store.import_folder(ckpts.other_eos, name="eos-draft")
    assert resolve_model("eos-draft") == ckpts.other_eos.resolve()
    with pytest.raises(ModelLoadError, match="models pull org/elsewhere"):
        resolve_model("org/elsewhere")
    with pytest.raises(ModelLoadError, match="No model named"):
        resolve_model("nothing-like-this")
    with pytest.raises(ModelLoadError, match="No model folder"):
        resolve_model("./no/such/folder")
    with pytest.raises(ModelLoadError, match="is a file"):
        resolve_model(str(ckpts.target / "config.json"))


def test_resolve_demo_without_demo_module(env, monkeypatch):
    import sys

    from app.checkpoints.resolve import resolve_model

    monkeypatch.setitem(sys.modules, "app.demo.target", None)  # as if not built yet
    with pytest.raises(ModelLoadError, match="demo"):
        resolve_model("demo")
    with pytest.raises(ModelLoadError, match="demo"):
        resolve_model("demo-draft")


# --- CLI -------------------------------------------------------------------------------------


def test_cli_check_exit_codes(ckpts, env, capsys):
    assert main(["check", str(ckpts.target), str(ckpts.draft)]) == 0
    out = capsys.readouterr().out
    assert "Verdict: Works" in out
    assert main(["check", str(ckpts.target), str(ckpts.other_eos)]) == 0  # warnings allowed
    assert main(["check", str(ckpts.target), str(ckpts.permuted)]) == 3
    out = capsys.readouterr().out
    assert "Will not work" in out and "number their tokens differently" in out
    assert main(["check", str(ckpts.target), str(ckpts.truncated), "--json"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "will-not-work" and data["summary"].startswith("Will not work")
    assert any(f["code"] == "draft.weights_corrupt" for f in data["findings"])
    # a recurrent target speculates (its state is rewound exactly): no cache finding; this
    # header-only folder is refused for what the load check finds missing, and only for that
    assert main(["check", str(ckpts.mamba), "--kind", "prompt-lookup", "--json"]) == 3
    codes = [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]
             if f["severity"] == "blocker"]
    assert codes and all(c.startswith(("target.load", "target.weights")) for c in codes), codes
    assert main(["check", str(ckpts.target), "--kind", "prompt-lookup", "--context", "512"]) == 0
    # usage errors: 2, one line, no traceback
    assert main(["check", str(env / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("draftpair: error:") and "Traceback" not in err
    assert main(["check", str(ckpts.target), str(ckpts.draft), "--kind", "prompt-lookup"]) == 2
    assert main(["check", str(ckpts.target), "--kind", "full-model"]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["check", str(ckpts.target), "--kind", "bogus"])
    assert exc.value.code == 2


def test_cli_models_list_import_rm(ckpts, env, capsys):
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    # nothing but the built-in demo drafters (when shipped) before any import
    rows = [ln for ln in out.splitlines()[1:] if ln.strip()]
    shipped = ("demo-draft ", "demo-dflash ", "demo-eagle3 ")
    assert "No local models" in out or all(ln.startswith(shipped) for ln in rows)
    assert main(["models", "import", str(ckpts.draft), "--name", "d1"]) == 0
    assert main(["models", "import", str(ckpts.truncated), "--name", "broken"]) == 1
    assert "would not load" in capsys.readouterr().err
    assert main(["models", "import", str(ckpts.truncated), "--name", "broken", "--force"]) == 0
    out = capsys.readouterr().out
    assert "cannot use it yet" in out
    assert main(["models", "list", "-v"]) == 0
    out = capsys.readouterr().out
    assert "d1" in out and "chat model" in out and "why unsupported" in out
    assert main(["models", "list", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    names = [e["name"] for e in entries if e.get("source") != SOURCE_BUILTIN]
    assert names == ["d1", "broken"]
    assert main(["models", "import", str(env / "nope")]) == 1
    assert main(["models", "rm", "d1"]) == 0
    assert "Forgot d1" in capsys.readouterr().out and ckpts.draft.exists()
    assert main(["models", "rm", "ghost"]) == 2
    shutil.copytree(ckpts.draft, Store().models_dir / "local-copy")
    assert main(["models", "rm", "local-copy"]) == 2  # deleting files needs --yes when not a tty
    assert main(["models", "rm", "local-copy", "--yes"]) == 0
    assert "Freed" in capsys.readouterr().out


def test_cli_convert_quantized(ckpts, env, capsys):
    out_dir = env / "converted"
    assert (
        main(
            [
                "models",
                "convert",
                str(ckpts.target),
                "-q",
                "--bits",
                "4",
                "--group-size",
                "32",
                "--out",
                str(out_dir),
            ]
        )
        == 0
    )
    info = inspect_checkpoint(out_dir)
    assert info.kind == KIND_CHAT and info.quantization.startswith("4-bit")
    assert info.param_count == inspect_checkpoint(ckpts.target).param_count
    assert not list(out_dir.glob("*.py"))
    # converting into an existing folder, or a pickle-only model, is a plain error
    assert main(["models", "convert", str(ckpts.target), "--out", str(out_dir)]) == 1
    assert "already exists" in capsys.readouterr().err
    pickles = env / "pickles"
    shutil.copytree(ckpts.draft, pickles)
    for p in pickles.glob("model.safetensors*"):
        p.unlink()
    (pickles / "pytorch_model.bin").write_bytes(b"\x80\x04")
    assert main(["models", "convert", str(pickles), "--out", str(env / "x")]) == 1
    assert "pickle" in capsys.readouterr().err


def test_mtp_weights_detected_in_both_layouts(tmp_path, ckpts):
    from tests.test_checkpoints_builders import make_header_checkpoint

    base = {
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 320,
    }
    ds = make_header_checkpoint(
        tmp_path / "dsv3",
        {
            **base,
            "model_type": "deepseek_v3",
            "num_hidden_layers": 2,
            "num_nextn_predict_layers": 1,
        },
        {
            "model.embed_tokens.weight": ("F32", (320, 64)),
            "model.layers.0.mlp.up_proj.weight": ("F32", (64, 64)),
            "model.layers.2.eh_proj.weight": ("F32", (64, 128)),
            "model.layers.2.enorm.weight": ("F32", (64,)),
        },
        tokenizer_from=ckpts.target,
    )
    info = inspect_checkpoint(ds)
    assert info.kind == KIND_MTP_TARGET
    assert set(info.mtp_tensors) == {"model.layers.2.eh_proj.weight", "model.layers.2.enorm.weight"}
    q = make_header_checkpoint(
        tmp_path / "q35",
        {**base, "model_type": "qwen3_5", "num_hidden_layers": 2, "mtp_num_hidden_layers": 1},
        {
            "model.language_model.embed_tokens.weight": ("F32", (320, 64)),
            "mtp.fc.weight": ("F32", (64, 128)),
        },
        tokenizer_from=ckpts.target,
    )
    info = inspect_checkpoint(q)
    assert info.kind == KIND_MTP_TARGET and info.mtp_tensors == ["mtp.fc.weight"]
    only_head = make_header_checkpoint(
        tmp_path / "head_only",
        {**base, "model_type": "qwen3_5", "num_hidden_layers": 2},
        {"mtp.fc.weight": ("F32", (64, 128))},
    )
    info = inspect_checkpoint(only_head)
    assert info.kind == KIND_UNSUPPORTED and "prediction head" in info.unsupported_reason
