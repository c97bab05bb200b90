"""Tiny Gemma 4 MTP assistants for tests, for the tiny Gemma 4 text target of
``builders_eagle3.make_gemma4_target`` (sliding and full layers, the last two KV-shared): a
folder as Google publishes one (``model_type: "gemma4_assistant"``, ``backbone_hidden_size``,
the assistant's layers under ``text_config``), random weights from a seeded RNG."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.builders_eagle3 import HEAD_DIM, HEADS, HIDDEN, KV_HEADS, make_gemma4_target

ROPE = {"full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                           "rope_type": "proportional"},
        "sliding_attention": {"partial_rotary_factor": 1.0, "rope_theta": 10000.0,
                              "rope_type": "default"}}


def assistant_config(vocab: int, *, backbone: int = HIDDEN, hidden: int = 32,
                     window: int = 8) -> dict:
    return {
        "model_type": "gemma4_assistant",
        "architectures": ["Gemma4AssistantForCausalLM"],
        "backbone_hidden_size": backbone,
        "use_ordered_embeddings": False,
        "tie_word_embeddings": True,
        "text_config": {
            "model_type": "gemma4_text", "hidden_size": hidden, "num_hidden_layers": 2,
            "intermediate_size": 2 * hidden, "num_attention_heads": HEADS,
            "head_dim": HEAD_DIM, "global_head_dim": 2 * HEAD_DIM,
            "num_key_value_heads": KV_HEADS, "num_global_key_value_heads": None,
            "layer_types": ["sliding_attention", "full_attention"], "sliding_window": window,
            "vocab_size": vocab, "vocab_size_per_layer_input": vocab,
            "hidden_size_per_layer_input": 0, "rms_norm_eps": 1e-6, "rope_parameters": ROPE,
            "attention_k_eq_v": False, "enable_moe_block": False,
            "use_double_wide_mlp": False, "max_position_embeddings": 2048,
            "final_logit_softcapping": None, "tie_word_embeddings": True,
        },
        "torch_dtype": "float32",
    }


def make_assistant(folder: Path, cfg: dict, *, seed: int = 9) -> Path:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from app.engine.drafters.gemma4_assistant_model import AssistantModel, read_config

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    model = AssistantModel(read_config(cfg))
    rng = np.random.default_rng(seed)
    out = {}
    for name, p in tree_flatten(model.parameters()):
        if name.endswith("norm.weight"):
            w = 1.0 + 0.1 * rng.standard_normal(p.shape)
        elif name.endswith("layer_scalar"):
            w = np.ones(p.shape)
        else:
            w = rng.standard_normal(p.shape) * (0.5 if "embed" in name else 1.0) / np.sqrt(
                p.shape[-1])
        out[name] = mx.array(w.astype(np.float32))
    mx.save_safetensors(str(folder / "model.safetensors"), out)
    return folder


def make_pair(root: Path, *, seed: int = 9, **kw) -> tuple[Path, Path]:
    root = Path(root)
    target = root / "gemma4"
    if not (target / "config.json").exists():
        make_gemma4_target(target)
    vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    name = f"assistant-{seed}" + "".join(f"-{k}{v}" for k, v in sorted(kw.items()))
    return target, make_assistant(root / name, assistant_config(vocab, **kw), seed=seed)
