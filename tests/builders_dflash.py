"""Tiny DFlash pairs for tests: a qwen3 target (mlx-lm classes, real tokenizer files) and
z-lab-layout drafter folders in either config schema, all weights from a seeded numpy RNG so
the golden script (tests/golden/make_dflash_golden.py) and the tests build identical files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.builders import write_tokenizer

HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16
TARGET_LAYERS = 6


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def make_qwen3_target(folder: Path, *, seed: int = 11, num_layers: int = TARGET_LAYERS,
                      hidden: int = HIDDEN) -> Path:
    """A tiny qwen3 checkpoint in mlx-lm format (random weights, scaled so greedy replies
    are not one repeated token)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm.models import qwen3
    from mlx_lm.utils import save_config, save_model

    folder = Path(folder)
    n_tokens = write_tokenizer(folder)
    data = json.loads((folder / "tokenizer.json").read_text())
    eos = next(t["id"] for t in data["added_tokens"] if t["content"] == "<|im_end|>")
    config = {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": num_layers,
        "intermediate_size": 2 * hidden,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "rms_norm_eps": 1e-6,
        "vocab_size": n_tokens,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "eos_token_id": eos,
        "torch_dtype": "float32",
    }
    model = qwen3.Model(qwen3.ModelArgs.from_dict(config))
    rng = _rng(seed)
    params = []
    for name, p in tree_flatten(model.parameters()):
        if name.endswith("norm.weight"):
            w = 1.0 + 0.1 * rng.standard_normal(p.shape)
        else:
            w = rng.standard_normal(p.shape) * (0.5 if "embed" in name else 0.25)
        params.append((name, mx.array(w.astype(np.float32))))
    model.update(tree_unflatten(params))
    mx.eval(model.parameters())
    save_model(folder, model)
    save_config(config, config_path=folder / "config.json")
    return folder


def dflash_config(schema: str, *, vocab: int, mask_token_id: int, layers: int = 2,
                  block_size: int = 4, target_layer_ids=(1, 3), num_target_layers: int =
                  TARGET_LAYERS, sliding_window: int | None = None,
                  hidden: int = HIDDEN) -> dict:
    """config.json of a z-lab drafter: ``schema`` "original" or "2026"."""
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "intermediate_size": 2 * hidden,
        "vocab_size": vocab,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 2048,
        "num_target_layers": num_target_layers,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
    dcfg = {"mask_token_id": mask_token_id, "target_layer_ids": list(target_layer_ids)}
    if schema == "original":
        cfg["block_size"] = block_size
        cfg["rope_theta"] = 10000.0
    elif schema == "2026":
        dcfg["block_size"] = block_size
        cfg["rope_parameters"] = {"rope_theta": 10000.0, "rope_type": "default"}
        kinds = ["full_attention"] * layers
        if sliding_window:
            kinds[0] = "sliding_attention"
            cfg["sliding_window"] = sliding_window
        cfg["layer_types"] = kinds
    else:
        raise ValueError(schema)
    cfg["dflash_config"] = dcfg
    return cfg


def dflash_weights(cfg: dict, *, seed: int) -> dict[str, np.ndarray]:
    """z-lab weight names and shapes (``fc``, ``hidden_norm``, ``layers.*``, ``norm``)."""
    rng = _rng(seed)
    h, n = cfg["hidden_size"], len(cfg["dflash_config"]["target_layer_ids"])
    qd = cfg["num_attention_heads"] * cfg["head_dim"]
    kd = cfg["num_key_value_heads"] * cfg["head_dim"]
    inter = cfg["intermediate_size"]

    def lin(out_dim, in_dim, scale=1.0):
        return (rng.standard_normal((out_dim, in_dim)) * scale / np.sqrt(in_dim)).astype(np.float32)

    def norm(d):
        return (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32)

    w = {"fc.weight": lin(h, n * h), "hidden_norm.weight": norm(h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        w[p + "self_attn.q_proj.weight"] = lin(qd, h, 2.0)
        w[p + "self_attn.k_proj.weight"] = lin(kd, h, 2.0)
        w[p + "self_attn.v_proj.weight"] = lin(kd, h, 4.0)
        w[p + "self_attn.o_proj.weight"] = lin(h, qd, 3.0)
        w[p + "self_attn.q_norm.weight"] = norm(cfg["head_dim"])
        w[p + "self_attn.k_norm.weight"] = norm(cfg["head_dim"])
        w[p + "mlp.gate_proj.weight"] = lin(inter, h)
        w[p + "mlp.up_proj.weight"] = lin(inter, h)
        w[p + "mlp.down_proj.weight"] = lin(h, inter)
        w[p + "input_layernorm.weight"] = norm(h)
        w[p + "post_attention_layernorm.weight"] = norm(h)
    w["norm.weight"] = norm(h)
    return w


def make_dflash_folder(folder: Path, cfg: dict, *, seed: int = 5,
                       weights: dict[str, np.ndarray] | None = None) -> Path:
    import mlx.core as mx

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    w = weights if weights is not None else dflash_weights(cfg, seed=seed)
    mx.save_safetensors(str(folder / "model.safetensors"), {k: mx.array(v) for k, v in w.items()})
    return folder


def mask_token(target: Path) -> int:
    """A special token of the tiny tokenizer that never shows up in text."""
    data = json.loads((Path(target) / "tokenizer.json").read_text())
    return max(t["id"] for t in data["added_tokens"])


def make_pair(root: Path, schema: str, *, sliding_window: int | None = None,
              block_size: int = 4, seed: int = 5) -> tuple[Path, Path]:
    """(target folder, drafter folder) under ``root`` (the target is shared per root)."""
    root = Path(root)
    target = root / "target"
    if not (target / "config.json").exists():
        make_qwen3_target(target)
    vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    cfg = dflash_config(schema, vocab=vocab, mask_token_id=mask_token(target),
                        block_size=block_size, sliding_window=sliding_window)
    name = f"dflash-{schema}" + (f"-sw{sliding_window}" if sliding_window else "")
    return target, make_dflash_folder(root / name, cfg, seed=seed)


# -- the cross-check scenarios (shared by the golden script and the tests) ---------------

PROMPT = tuple(range(20, 36))  # prompt token ids of the loop scenario
LOOP_MAX_TOKENS = 24
# network scenarios: context rows appended per drafting pass. Sliding layers see the last
# window-1 context positions; after the first pass the context grows one row at a time there
# (mlx-vlm's rotating cache keeps more than the window after a multi-row write).
NET_STEPS = {"original": (7, 3, 1, 2), "2026": (7, 3, 1, 2), "2026-sw6": (9, 1, 1, 1)}


def net_inputs(cfg: dict, steps, *, seed: int = 99) -> list[tuple[np.ndarray, int]]:
    """(features (1, S, n*H), first block token) per drafting pass."""
    rng = _rng(seed)
    n_in = len(cfg["dflash_config"]["target_layer_ids"]) * cfg["hidden_size"]
    out = []
    for s in steps:
        feats = rng.standard_normal((1, s, n_in)).astype(np.float32)
        out.append((feats, int(rng.integers(0, cfg["vocab_size"] - 20))))
    return out
