"""Tiny checkpoints of recurrent, hybrid and sliding-window families, built with mlx-lm's own
model classes and the real tokenizer files of ``tests.builders`` (deterministic seeds)."""

from __future__ import annotations

import copy
import importlib
import json
import shutil
from pathlib import Path

from tests.builders import _token_id, write_tokenizer


def _configs(vocab: int, eos: int) -> dict[str, dict]:
    base = {"vocab_size": vocab, "eos_token_id": eos, "tie_word_embeddings": False,
            "torch_dtype": "float32", "max_position_embeddings": 4096}
    return {
        # Gated DeltaNet + attention (layers 1 and 3 attend), text_config as shipped
        "qwen3_5": {"model_type": "qwen3_5", "eos_token_id": eos, "tie_word_embeddings": False,
                    "text_config": {**base, "model_type": "qwen3_5_text", "hidden_size": 64,
                                    "intermediate_size": 128, "num_hidden_layers": 4,
                                    "num_attention_heads": 4, "num_key_value_heads": 2,
                                    "head_dim": 16, "linear_num_value_heads": 4,
                                    "linear_num_key_heads": 2, "linear_key_head_dim": 16,
                                    "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
                                    "full_attention_interval": 2, "rms_norm_eps": 1e-6}},
        # Gated DeltaNet + attention with a small mixture of experts
        "qwen3_next": {**base, "model_type": "qwen3_next", "hidden_size": 64,
                       "intermediate_size": 128, "num_hidden_layers": 4,
                       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                       "linear_num_value_heads": 4, "linear_num_key_heads": 2,
                       "linear_key_head_dim": 16, "linear_value_head_dim": 16,
                       "linear_conv_kernel_dim": 4, "num_experts": 4, "num_experts_per_tok": 2,
                       "decoder_sparse_step": 1, "shared_expert_intermediate_size": 64,
                       "mlp_only_layers": [], "moe_intermediate_size": 32,
                       "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
                       "partial_rotary_factor": 0.25, "full_attention_interval": 2},
        # Mamba-2 mixers + attention + MLP blocks
        "nemotron_h": {**base, "model_type": "nemotron_h", "hidden_size": 64,
                       "intermediate_size": 128, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "head_dim": 16, "attention_bias": False,
                       "mamba_num_heads": 4, "mamba_head_dim": 16, "mamba_proj_bias": False,
                       "ssm_state_size": 16, "conv_kernel": 4, "n_groups": 2,
                       "mlp_bias": False, "layer_norm_epsilon": 1e-5, "use_bias": False,
                       "use_conv_bias": True, "hybrid_override_pattern": ["M", "*", "M", "-"],
                       "num_hidden_layers": 4},
        "mamba2": {**base, "model_type": "mamba2", "num_heads": 8, "head_dim": 16, "expand": 2,
                   "hidden_size": 64, "intermediate_size": 128, "state_size": 16,
                   "num_hidden_layers": 2, "layer_norm_epsilon": 1e-5, "conv_kernel": 4,
                   "n_groups": 1, "use_bias": False, "use_conv_bias": True,
                   "time_step_limit": [0.0, 1e9], "time_step_rank": "auto"},
        # Mamba v1: no covered recurrence -> the snapshot-and-replay strategy
        "mamba": {**base, "model_type": "mamba", "hidden_size": 32, "intermediate_size": 64,
                  "state_size": 8, "num_hidden_layers": 2, "conv_kernel": 4,
                  "use_bias": False, "use_conv_bias": True, "time_step_rank": 4},
        # sliding window of 8 on every other layer: long prompts wrap it
        "gemma3_text": {**base, "model_type": "gemma3_text", "hidden_size": 64,
                        "intermediate_size": 128, "num_hidden_layers": 4,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                        "query_pre_attn_scalar": 16, "sliding_window": 8,
                        "sliding_window_pattern": 2, "rms_norm_eps": 1e-6},
        "llama": {**base, "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "rms_norm_eps": 1e-5, "rope_theta": 10000.0},
        "qwen3": {**base, "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000.0},
        "deepseek_v3": {**base, "model_type": "deepseek_v3", "hidden_size": 64,
                        "intermediate_size": 128, "moe_intermediate_size": 32,
                        "num_hidden_layers": 2, "num_attention_heads": 4,
                        "num_key_value_heads": 4, "n_shared_experts": 1, "n_routed_experts": 4,
                        "num_experts_per_tok": 2, "kv_lora_rank": 16, "q_lora_rank": None,
                        "qk_rope_head_dim": 8, "v_head_dim": 16, "qk_nope_head_dim": 16,
                        "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1},
    }


FAMILIES = ("qwen3_5", "qwen3_next", "nemotron_h", "mamba2", "mamba", "gemma3_text", "llama", "qwen3",
            "deepseek_v3")
# noise of a perturbed copy that agrees with the target often but not always
DRAFT_NOISE = {"qwen3_5": 0.002, "qwen3_next": 0.002, "nemotron_h": 0.002, "mamba2": 0.002, "mamba": 0.02,
               "gemma3_text": 0.002, "llama": 0.01, "qwen3": 0.01, "deepseek_v3": 0.01}


def make_family_checkpoint(folder: Path, family: str, *, seed: int = 0,
                           weight_scale: float = 1.0, overrides: dict | None = None) -> Path:
    """A tiny ``family`` checkpoint in mlx-lm format with real tokenizer files
    (``overrides`` replace fields of the (text) config, e.g. to build a larger shape)."""
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_lm.utils import save_config, save_model

    folder = Path(folder)
    vocab = write_tokenizer(folder)
    config = copy.deepcopy(_configs(vocab, _token_id(folder, "<|im_end|>"))[family])
    (config.get("text_config") or config).update(overrides or {})
    module = importlib.import_module(f"mlx_lm.models.{family}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(copy.deepcopy(config)))
    if weight_scale != 1.0:
        model.update(tree_map(lambda w: w * weight_scale, model.parameters()))
    mx.eval(model.parameters())
    save_model(folder, model)
    save_config(config, config_path=folder / "config.json")
    return folder


def perturbed_copy(src: Path, dst: Path, *, noise: float, seed: int = 1) -> Path:
    """The same checkpoint with Gaussian noise on every weight: a draft that agrees with the
    target often, not always (rejections at varied positions)."""
    import mlx.core as mx
    from mlx_lm.utils import load_model, save_model

    dst = Path(dst)
    shutil.copytree(src, dst, dirs_exist_ok=True)
    model, _ = load_model(Path(src))
    from mlx.utils import tree_map

    mx.random.seed(seed)
    model.update(tree_map(lambda w: w + noise * mx.random.normal(w.shape, dtype=w.dtype)
                          if mx.issubdtype(w.dtype, mx.floating) else w, model.parameters()))
    mx.eval(model.parameters())
    for f in dst.glob("*.safetensors"):
        f.unlink()
    save_model(dst, model)
    cfg = json.loads((Path(src) / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst
