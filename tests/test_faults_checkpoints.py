"""The checkpoint fault matrix: the load check says blocker exactly when the real load fails.

Every case damages a copy of a tiny real llama checkpoint, then runs both
``app.checkpoints.pairing.load_check.load_check`` (no weights read) and the real
``app.engine.models.load_model`` (through mlx-lm) followed by one forward step. The two must
agree, the expected outcome is stated per case (so a check that blocks everything fails too),
and neither message may show an exception class or a constructor signature.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.checkpoints.pairing.load_check import load_check, would_load

PYTHON_WORDS = re.compile(
    r"__init__|TypeError|ValueError|KeyError|RuntimeError|Traceback|positional argument|"
    r"NoneType|\[read\]|\[load_safetensors\]|json\.exception"
)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from tests.builders import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("base") / "tiny", seed=3)


@pytest.fixture(scope="module")
def quantized(base, tmp_path_factory):
    from mlx_lm.convert import convert

    out = tmp_path_factory.mktemp("quant") / "tiny-q"
    convert(str(base), mlx_path=str(out), quantize=True, q_group_size=32, q_bits=4)
    return out


def edit_config(folder: Path, **changes) -> None:
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    for k, v in changes.items():
        if v is ...:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    path.write_text(json.dumps(cfg))


def weights(folder: Path) -> Path:
    return folder / "model.safetensors"


def _truncate(f: Path) -> None:
    data = weights(f).read_bytes()
    weights(f).write_bytes(data[: len(data) // 2])


def _garble_header(f: Path) -> None:
    data = bytearray(weights(f).read_bytes())
    data[8:40] = b"{ this is not json at all !!!!!!"
    weights(f).write_bytes(bytes(data))


def _pickle_only(f: Path) -> None:
    weights(f).unlink()
    (f / "pytorch_model.bin").write_bytes(b"\x80\x04\x95 not really a pickle")


def _no_tokenizer(f: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (f / name).unlink()


def _config_loop(f: Path) -> None:
    (f / "config.json").unlink()
    os.symlink("config.json", f / "config.json")


def _misnamed(f: Path) -> None:
    weights(f).rename(f / "weights.safetensors")


def _extra_shard(f: Path) -> None:
    import mlx.core as mx

    mx.save_safetensors(str(f / "model-mtp.safetensors"),
                        {"mtp.layers.0.fc.weight": mx.zeros((4, 4))})


# (id, how to damage the folder, should it load)
CASES = [
    ("intact", lambda f: None, True),
    ("missing keys", lambda f: edit_config(
        f, hidden_size=..., num_hidden_layers=..., intermediate_size=...), False),
    ("no model_type", lambda f: edit_config(f, model_type=...), False),
    ("hidden size as text", lambda f: edit_config(f, hidden_size="64"), False),
    ("norm eps as text", lambda f: edit_config(f, rms_norm_eps="1e-5"), False),
    ("heads null", lambda f: edit_config(f, num_attention_heads=None), False),
    ("layers as decimal", lambda f: edit_config(f, num_hidden_layers=2.0), False),
    ("context as decimal", lambda f: edit_config(f, max_position_embeddings=2048.0), False),
    ("more layers than weights", lambda f: edit_config(f, num_hidden_layers=4), False),
    ("fewer layers than weights", lambda f: edit_config(f, num_hidden_layers=1), False),
    ("vocab not the weights'", lambda f: edit_config(f, vocab_size=400), False),
    ("untied head without weights", lambda f: edit_config(f, tie_word_embeddings=False), False),
    ("no tokenizer", _no_tokenizer, False),
    ("tokenizer garbled", lambda f: (f / "tokenizer.json").write_bytes(b"\x00\xff{garbage"), False),
    ("truncated weights", _truncate, False),
    ("zero-byte weights", lambda f: weights(f).write_bytes(b""), False),
    ("garbled header", _garble_header, False),
    ("config not an object", lambda f: (f / "config.json").write_text("[1, 2, 3]"), False),
    ("config not JSON", lambda f: (f / "config.json").write_text("{'model_type': llama"), False),
    ("config binary", lambda f: (f / "config.json").write_bytes(b"\xff\xfe\x00\x01"), False),
    ("unknown architecture", lambda f: edit_config(f, model_type="nosuchmodel"), False),
    ("pickle only", _pickle_only, False),
    ("config symlink loop", _config_loop, False),
    ("weights misnamed", _misnamed, False),
    ("unrelated extra file", lambda f: (f / "notes.txt").write_text("hello"), True),
    ("extra tensors in a shard", _extra_shard, False),
    ("only sliding layers", lambda f: edit_config(
        f, layer_types=["sliding_attention"] * 2, sliding_window=64), False),
    ("no vocab size", lambda f: edit_config(f, vocab_size=...), False),
    ("remote code", lambda f: edit_config(f, model_file="modeling_x.py"), False),
]


def real_load(folder: Path) -> tuple[bool, str]:
    """The real thing: DraftPair's loader through mlx-lm, then one forward step."""
    import mlx.core as mx

    from app.engine.models import load_model
    from app.errors import DraftPairError, user_message

    try:
        loaded = load_model(folder, backend="cpu")
        mx.eval(loaded.model(mx.array([[1, 2]])))
        loaded.tokenizer.encode("hello")
    except DraftPairError as exc:
        return False, str(exc)
    except Exception as exc:  # noqa: BLE001 - the first forward of a mis-typed config
        return False, user_message(exc, folder=folder)
    return True, ""


def assert_plain(text: str) -> None:
    assert text and not PYTHON_WORDS.search(text), text


@pytest.mark.parametrize("name,damage,loads", CASES, ids=[c[0] for c in CASES])
def test_check_predicts_the_load(base, tmp_path, name, damage, loads):
    folder = tmp_path / "my models" / "Modèle ü 模型"  # spaces and non-ASCII on every case
    shutil.copytree(base, folder)
    damage(folder)
    findings = load_check(folder, "target")
    predicted = would_load(findings)
    actual, message = real_load(folder)
    assert actual == loads, f"{name}: expected load={loads}, got {actual} ({message})"
    blockers = [f for f in findings if f.severity == "blocker"]
    assert predicted == actual, f"{name}: check said {blockers or 'fine'}, load said {message!r}"
    for f in blockers:
        assert f.code.startswith("target.load.") and f.detail
        assert_plain(f.message)
        assert str(folder) in f.message or folder.name in f.message, f.message
    if not actual:
        assert_plain(message)
    # the fast mode (tokenizer files parsed, not loaded) predicts the same
    assert would_load(load_check(folder, "target", tokenizer="files")) == actual, name



def test_quantized_checkpoints(quantized, tmp_path):
    assert would_load(load_check(quantized)) and real_load(quantized)[0]
    broken = tmp_path / "q-no-scales"
    shutil.copytree(quantized, broken)
    import mlx.core as mx

    w = mx.load(str(weights(broken)))
    w = {k: v for k, v in w.items() if not k.startswith("model.layers.0.mlp.down_proj.scales")}
    mx.save_safetensors(str(weights(broken)), w)
    assert not would_load(load_check(broken)) and not real_load(broken)[0]


def test_folder_is_a_symlink_loop(tmp_path):
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    findings = load_check(loop)
    assert not would_load(findings) and "link loop" in findings[0].message
    assert not real_load(loop)[0]


def test_missing_keys_message_names_them(base, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(base, folder)
    edit_config(folder, hidden_size=..., num_hidden_layers=..., intermediate_size=...)
    (finding,) = [f for f in load_check(folder) if f.severity == "blocker"]
    assert finding.message.startswith(f"config.json in {folder} lacks")
    for key in ("hidden_size", "num_hidden_layers", "intermediate_size"):
        assert key in finding.message
    assert "llama" in finding.message and "__init__" in finding.detail


def test_seven_billion_config_is_checked_without_memory(base, tmp_path):
    """A 7B-shaped header (sparse file) is judged in well under a second, nothing allocated."""
    import resource
    import struct

    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
           "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 32,
           "rms_norm_eps": 1e-5, "vocab_size": 32000, "tie_word_embeddings": False}
    model = llama.Model(llama.ModelArgs.from_dict(cfg))
    header, off = {}, 0
    for k, v in tree_flatten(model.parameters()):
        header[k] = {"dtype": "F16", "shape": list(v.shape), "data_offsets": [off, off + v.size * 2]}
        off += v.size * 2
    folder = tmp_path / "seven-b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(base / name, folder / name)
    raw = json.dumps(header).encode()
    with open(weights(folder), "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + off)  # 13 GB, sparse
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert would_load(load_check(folder))
    edit_config(folder, num_hidden_layers=40)
    assert "40 layers but the weights hold only 32" in " ".join(
        f.message for f in load_check(folder))
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 200 * 1024, f"the check grew the process by {grown_kib} KiB"
    assert mx.get_peak_memory() < 1 << 30


CHILD = """
import json, os, sys
from pathlib import Path
from app.checkpoints.pairing.load_check import load_check, would_load
from tests.test_faults_checkpoints import real_load
load_check(sys.argv[2]); real_load(Path(sys.argv[2]))  # every import done while privileged
if os.geteuid() == 0:  # root reads everything: become nobody (Python lives under /root here)
    os.setgid(65534)
    os.setuid(65534)
f = load_check(sys.argv[1])
ok, msg = real_load(Path(sys.argv[1]))
print(json.dumps({"check": would_load(f), "messages": [x.message for x in f], "load": ok,
                  "load_message": msg}))
"""


def test_unreadable_folder(base):
    """chmod 000 as a user who cannot read it. Root reads everything, so as root the child
    drops to ``nobody`` after its imports; if that is refused the test is skipped."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="draftpair-locked-"))
    try:
        root.chmod(0o755)
        home = root / "home"
        home.mkdir()
        home.chmod(0o777)
        folder = root / "locked model"
        shutil.copytree(base, folder)
        shutil.copytree(base, root / "intact")
        folder.chmod(0o000)
        env = dict(os.environ, DRAFTPAIR_NO_BLAS_FIX="1", HOME=str(home), HF_HOME=str(home),
                   PYTHONPATH=str(Path(__file__).resolve().parent.parent))
        proc = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(root / "intact")],
                              env=env, capture_output=True, text=True, timeout=120,
                              cwd=str(Path(__file__).resolve().parent.parent))
        folder.chmod(0o755)
    finally:
        for p in (root, *root.rglob("*")):
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(root, ignore_errors=True)
    if proc.returncode != 0 and "PermissionError" in proc.stderr and "setuid" in proc.stderr:
        pytest.skip("this process may not drop privileges")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["check"] is False and out["load"] is False
    assert any("permission denied" in m for m in out["messages"]), out
    assert_plain(out["load_message"])


def test_cli_check_refuses_what_would_not_load(base, tiny_draft, tmp_path, capsys, monkeypatch):
    from app.cli import main

    monkeypatch.setenv("DRAFTPAIR_NO_BLAS_FIX", "1")
    folder = tmp_path / "bad model"
    shutil.copytree(base, folder)
    edit_config(folder, hidden_size=...)
    assert main(["check", str(folder)]) == 3
    out = capsys.readouterr().out
    assert "Will not work" in out and "lacks hidden_size that a llama model needs" in out
    assert main(["check", str(base), str(tiny_draft)]) == 0
