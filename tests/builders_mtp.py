"""Tiny Qwen3.5 checkpoints with MTP weights, in the layout Hugging Face ships them.

The target is a real mlx-lm ``qwen3_5`` model (hybrid: GatedDeltaNet layers plus one
full-attention layer every ``full_attention_interval``) with random weights, written the way
the Qwen3.5 repositories store it: ``config.json`` with a nested ``text_config`` declaring
``mtp_num_hidden_layers``, tensors named ``model.language_model.*`` and ``lm_head.weight``,
conv1d kernels as ``(C, 1, K)``, RMSNorm weights as ``w`` for ``1 + w`` — and the MTP module
as ``mtp.*`` (random too, norms also stored as ``w``). mlx-lm's loader drops ``mtp.*``.
Deterministic: the same arguments give the same tensors.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.builders import _token_id, write_tokenizer

_NORM_SUFFIXES = (".input_layernorm.weight", ".post_attention_layernorm.weight",
                  "model.norm.weight", ".q_norm.weight", ".k_norm.weight")
_MTP_NORMS = ("pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight", "norm.weight")


def text_config(vocab: int, *, hidden: int = 64, layers: int = 4, tie: bool = False,
                eos: int = 0) -> dict:
    return {
        "model_type": "qwen3_5_text",
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "max_position_embeddings": 4096,
        "linear_num_value_heads": 4,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "full_attention_interval": 4,
        "tie_word_embeddings": tie,
        "attention_bias": False,
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "rope_parameters": {"type": "default", "rope_theta": 10000.0,
                            "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0]},
        "eos_token_id": eos,
    }


def make_qwen3_5_checkpoint(folder: Path, *, seed: int = 0, with_mtp: bool = True,
                            mtp_hidden: int | None = None, tie: bool = False,
                            weight_scale: float = 2.0) -> Path:
    """A tiny Qwen3.5 checkpoint in the HF layout; ``with_mtp=False`` drops ``mtp.*`` (as a
    conversion that lost them), ``mtp_hidden`` gives the MTP layer a wrong width."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3_5

    folder = Path(folder)
    n_tokens = write_tokenizer(folder)
    eos = _token_id(folder, "<|im_end|>")
    tc = text_config(n_tokens, tie=tie, eos=eos)
    config = {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
              "text_config": tc, "tie_word_embeddings": tie, "eos_token_id": eos,
              "torch_dtype": "float32"}
    mx.random.seed(seed)
    model = qwen3_5.Model(qwen3_5.ModelArgs.from_dict(config))
    hf: dict[str, mx.array] = {}
    for k, v in tree_flatten(model.parameters()):
        if k.startswith("language_model.model."):
            name = "model.language_model." + k[len("language_model.model."):]
        elif k.startswith("language_model.lm_head"):
            name = k[len("language_model."):]
        else:
            name = k
        if "conv1d.weight" in name:
            v = v.moveaxis(2, 1)  # mlx (C, K, 1) -> HF (C, 1, K)
        elif name.endswith(_NORM_SUFFIXES):
            v = v - 1.0 + 0.1 * mx.random.normal(v.shape)
        elif v.ndim == 2:
            v = v * weight_scale
        hf[name] = v
    if with_mtp:
        hf.update(mtp_tensors(config, seed=seed + 1, hidden=mtp_hidden))
    mx.eval(list(hf.values()))
    mx.save_safetensors(str(folder / "model.safetensors"), hf)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def mtp_tensors(config: dict, *, seed: int, hidden: int | None = None) -> dict:
    """Random ``mtp.*`` tensors: fc, the two input norms, one full-attention layer, norm."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3_5

    tc = dict(config["text_config"])
    if hidden is not None:
        tc["hidden_size"] = hidden
    args = qwen3_5.TextModelArgs.from_dict(tc)
    mx.random.seed(seed)
    H = args.hidden_size
    layer = qwen3_5.DecoderLayer(args, layer_idx=args.full_attention_interval - 1)
    out = {"mtp.fc.weight": mx.random.normal((H, 2 * H)) * (2 * H) ** -0.5}
    for name in _MTP_NORMS:
        out[f"mtp.{name}"] = 0.2 * mx.random.normal((H,))  # HF form: the norm is 1 + w
    for k, v in tree_flatten(layer.parameters()):
        key = f"mtp.layers.0.{k}"
        if key.endswith(_NORM_SUFFIXES):
            v = 0.2 * mx.random.normal(v.shape)
        elif v.ndim == 2:
            v = v * 2.0
        out[key] = v
    return out
