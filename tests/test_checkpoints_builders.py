"""Helpers that build checkpoint folders for the checkpoint/pairing/hub tests (+ header tests).

Real files only: tiny mlx-lm checkpoints from tests.builders, and folders whose safetensors
hold headers (and zero or sparse data) for shapes too big or too odd to build for real.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.builders import make_checkpoint

DTYPE_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "U8": 1}


def write_safetensors(
    path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]], *, sparse: bool = False
) -> Path:
    """A valid safetensors file with zero data (sparse: the data region is a hole on disk)."""
    header: dict = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = DTYPE_SIZE[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        if sparse:
            f.truncate(8 + len(raw) + offset)
        else:
            f.write(b"\0" * offset)
    return path


def copy_tokenizer(src: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / name, dest / name)


def llama_tensors(hidden: int, layers: int, vocab: int, inter: int, kv_dim: int) -> dict:
    t = {
        "model.embed_tokens.weight": ("F32", (vocab, hidden)),
        "model.norm.weight": ("F32", (hidden,)),
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = ("F32", (hidden, hidden))
        t[p + "self_attn.k_proj.weight"] = ("F32", (kv_dim, hidden))
        t[p + "self_attn.v_proj.weight"] = ("F32", (kv_dim, hidden))
        t[p + "self_attn.o_proj.weight"] = ("F32", (hidden, hidden))
        t[p + "mlp.gate_proj.weight"] = ("F32", (inter, hidden))
        t[p + "input_layernorm.weight"] = ("F32", (hidden,))
    return t


def make_header_checkpoint(
    folder: Path,
    config: dict,
    tensors: dict,
    *,
    tokenizer_from: Path | None = None,
    sparse: bool = False,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    write_safetensors(folder / "model.safetensors", tensors, sparse=sparse)
    if tokenizer_from is not None:
        copy_tokenizer(tokenizer_from, folder)
    return folder


def dflash_config(target_cfg: dict, *, layout: str = "original", layers: int | None = None) -> dict:
    n = layers or target_cfg["num_hidden_layers"]
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": target_cfg["hidden_size"],
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": target_cfg["vocab_size"],
        "num_target_layers": n,
    }
    ids = [0, n - 1]
    if layout == "original":
        cfg.update(
            block_size=16,
            rope_theta=10000.0,
            dflash_config={"mask_token_id": 1, "target_layer_ids": ids},
        )
    else:
        cfg.update(
            rope_parameters={"rope_theta": 10000.0, "rope_type": "default"},
            sliding_window=None,
            layer_types=["full_attention"],
            dflash_config={"mask_token_id": 1, "target_layer_ids": ids, "block_size": 16},
        )
    return cfg


def dflash_tensors(hidden: int, n_ctx_layers: int = 2) -> dict:
    return {
        "fc.weight": ("F32", (hidden, n_ctx_layers * hidden)),
        "hidden_norm.weight": ("F32", (hidden,)),
        "layers.0.self_attn.q_proj.weight": ("F32", (hidden, hidden)),
        "norm.weight": ("F32", (hidden,)),
    }


_BUILT: dict[str, SimpleNamespace] = {}

SMALL = {
    "hidden_size": 32,
    "num_heads": 2,
    "num_kv_heads": 1,
    "num_layers": 1,
    "intermediate_size": 64,
}


def standard_checkpoints(base: Path) -> SimpleNamespace:
    """Build (once per test session) the folders the pairing matrix uses."""
    key = "std"
    if key in _BUILT:
        return _BUILT[key]
    ns = SimpleNamespace()
    ns.base = base
    ns.target = make_checkpoint(base / "target")
    ns.draft = make_checkpoint(base / "draft", seed=1, **SMALL)
    ns.permuted = make_checkpoint(
        base / "permuted", seed=1, tokenizer_kwargs={"permute_seed": 7}, **SMALL
    )
    ns.target_extra = make_checkpoint(
        base / "target_extra", tokenizer_kwargs={"extra_added": ("<tool>", "<think>")}
    )
    ns.draft_extra = make_checkpoint(
        base / "draft_extra", seed=1, tokenizer_kwargs={"extra_added": ("<tool>",)}, **SMALL
    )
    ns.other_eos = make_checkpoint(
        base / "other_eos", seed=1, tokenizer_kwargs={"eos_token": "<|endoftext|>"}, **SMALL
    )
    ns.draft_big_vocab = make_checkpoint(base / "draft_big_vocab", seed=1, vocab_size=400, **SMALL)
    ns.padded_target = make_checkpoint(base / "padded_target", vocab_size=384)
    ns.no_vocab = make_checkpoint(base / "no_vocab", seed=1, **SMALL)
    cfg = json.loads((ns.no_vocab / "config.json").read_text())
    del cfg["vocab_size"]
    (ns.no_vocab / "config.json").write_text(json.dumps(cfg))
    target_cfg = json.loads((ns.target / "config.json").read_text())
    ns.target_cfg = target_cfg
    ns.dflash = make_header_checkpoint(
        base / "dflash", dflash_config(target_cfg), dflash_tensors(target_cfg["hidden_size"])
    )
    ns.dflash_new = make_header_checkpoint(
        base / "dflash_new",
        dflash_config(target_cfg, layout="2026-06"),
        dflash_tensors(target_cfg["hidden_size"]),
    )
    ns.dflash_wrong = make_header_checkpoint(
        base / "dflash_wrong",
        dflash_config(target_cfg, layers=28),
        dflash_tensors(target_cfg["hidden_size"]),
    )
    mamba_cfg = {
        "model_type": "mamba", "architectures": ["MambaForCausalLM"], "hidden_size": 64,
        "num_hidden_layers": 2, "vocab_size": target_cfg["vocab_size"], "state_size": 16,
        "conv_kernel": 4, "intermediate_size": 128, "expand": 2,
    }  # fmt: skip
    ns.mamba = make_header_checkpoint(
        base / "mamba", mamba_cfg,
        {"backbone.embeddings.weight": ("F32", (target_cfg["vocab_size"], 64)), "backbone.norm_f.weight": ("F32", (64,))},
        tokenizer_from=ns.target,
    )  # fmt: skip
    sw_cfg = dict(
        target_cfg,
        sliding_window=128,
        layer_types=["sliding_attention"] * target_cfg["num_hidden_layers"],
    )
    ns.sliding = base / "sliding"
    shutil.copytree(ns.target, ns.sliding)
    (ns.sliding / "config.json").write_text(json.dumps(sw_cfg))
    ns.truncated = base / "truncated"
    shutil.copytree(ns.draft, ns.truncated)
    st = ns.truncated / "model.safetensors"
    st.write_bytes(st.read_bytes()[: st.stat().st_size // 2])
    ns.bad_header = base / "bad_header"
    shutil.copytree(ns.draft, ns.bad_header)
    (ns.bad_header / "model.safetensors").write_bytes(
        struct.pack("<Q", 40) + b"{this is not json at all!!!!!!!!!!!!!!!}" + b"\0" * 64
    )
    ns.garbled_config = base / "garbled_config"
    shutil.copytree(ns.draft, ns.garbled_config)
    (ns.garbled_config / "config.json").write_text(
        '{"model_type": "llama", "hidden_size": 32,,, oops'
    )
    ns.garbled_tokenizer = base / "garbled_tokenizer"
    shutil.copytree(ns.draft, ns.garbled_tokenizer)
    (ns.garbled_tokenizer / "tokenizer.json").write_text(
        '{"model": {"type": "BPE", "vocab": {"a": 0,'
    )
    ns.mtp_target = base / "mtp_target"
    shutil.copytree(ns.target, ns.mtp_target)
    write_safetensors(
        ns.mtp_target / "model-mtp.safetensors",
        {
            "mtp.fc.weight": ("F32", (64, 128)),
            "mtp.norm.weight": ("F32", (64,)),
            "mtp.layers.0.self_attn.q_proj.weight": ("F32", (64, 64)),
        },
    )
    ns.head_draft = base / "head_draft"
    shutil.copytree(ns.draft, ns.head_draft)
    (ns.head_draft / "draft_head.json").write_text(
        json.dumps({"format": 1, "token_ids": list(range(0, 200))})
    )
    _BUILT[key] = ns
    return ns


@pytest.fixture(scope="session")
def ckpts(tmp_path_factory) -> SimpleNamespace:
    return standard_checkpoints(tmp_path_factory.mktemp("ckpts"))


# --- tests of the header reader itself --------------------------------------------------------


def test_header_of_real_checkpoint(ckpts):
    from app.checkpoints.safetensors_header import read_header, summarize_weights

    h = read_header(ckpts.target / "model.safetensors")
    assert "model.embed_tokens.weight" in h.tensors
    s = summarize_weights(ckpts.target)
    assert s.ok and s.param_count == sum(t.numel for t in h.tensors.values())
    assert s.weight_bytes == h.data_bytes


def test_truncated_and_garbage_headers(ckpts, tmp_path):
    from app.checkpoints.safetensors_header import HeaderError, read_header

    for bad in (ckpts.truncated, ckpts.bad_header):
        with pytest.raises(HeaderError) as err:
            read_header(bad / "model.safetensors")
        assert "model.safetensors" in str(err.value)
    tiny = tmp_path / "tiny.safetensors"
    tiny.write_bytes(b"\x01\x02")
    with pytest.raises(HeaderError, match="too short"):
        read_header(tiny)
    huge_len = tmp_path / "huge_len.safetensors"
    huge_len.write_bytes(struct.pack("<Q", 2**60) + b"{}")
    with pytest.raises(HeaderError, match="truncated or not a safetensors"):
        read_header(huge_len)


def test_sparse_huge_file_reads_only_the_header(tmp_path):
    import time

    from app.checkpoints.safetensors_header import summarize_weights

    # 8 GB declared (a sparse file: no disk used), read in milliseconds
    write_safetensors(
        tmp_path / "model.safetensors",
        {"model.embed_tokens.weight": ("F32", (131072, 16384))},
        sparse=True,
    )
    t = time.perf_counter()
    s = summarize_weights(tmp_path)
    assert time.perf_counter() - t < 0.5
    assert s.ok and s.param_count == 131072 * 16384 and s.weight_bytes == 131072 * 16384 * 4


def test_quantized_parameter_count(tmp_path):
    from app.checkpoints.safetensors_header import summarize_weights

    tensors = {
        "model.layers.0.mlp.up_proj.weight": ("U32", (128, 8)),  # 64 inputs, 4 bits
        "model.layers.0.mlp.up_proj.scales": ("F16", (128, 1)),
        "model.layers.0.mlp.up_proj.biases": ("F16", (128, 1)),
    }
    write_safetensors(tmp_path / "model.safetensors", tensors)
    cfg = {"quantization": {"bits": 4, "group_size": 64}}
    assert summarize_weights(tmp_path, cfg).param_count == 128 * 64
    assert summarize_weights(tmp_path, None).param_count == 128 * 64  # bits inferred from shapes
