"""What a GGUF architecture is in mlx-lm terms: its config.json and where each tensor goes.

Public API:
    SUPPORTED: dict[str, str]                      GGUF architecture -> mlx-lm model_type
    mlx_config(meta, tensor_names) -> dict         config.json for the converted checkpoint
    tensor_plan(config) -> TensorPlan              GGUF tensor name -> mlx-lm parameter name,
                                                   with the expected shapes (from an mlx-lm
                                                   skeleton of the model, never evaluated)
    fix_tensor(gguf_arch, gguf_name, array, config) -> array   undo llama.cpp's layout changes

Config keys follow llama.cpp's writer (convert_hf_to_gguf.py) and transformers' GGUF config map;
tensor names come from the ``gguf`` package's own HF <-> GGUF name map. Two value changes are
undone: the Q/K row permutation llama.cpp applies to llama-family attention, and the ``+ 1``
it folds into Gemma's RMSNorm weights.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from app.errors import DraftPairError

SUPPORTED = {
    "llama": "llama",  # also Mistral/Ministral 7-8B and other llama-shaped models
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen3moe": "qwen3_moe",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
    "phi3": "phi3",
}
PERMUTED_QK = {"llama"}  # llama.cpp's LlamaModel.permute
NORM_PLUS_ONE = {"gemma2", "gemma3"}
# tensors that carry configuration, not module weights (folded into config.json instead)
CONFIG_TENSORS = re.compile(r"^(rope_freqs|rope_factors_long|rope_factors_short)\.weight$")


class GGUFArchError(DraftPairError):
    pass


def _get(meta: dict, key: str, default=None):
    v = meta.get(key, default)
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
        return max(v)  # per-layer arrays (e.g. head_count_kv): the widest layer
    return v


def mlx_config(meta: dict, tensor_names: set[str], tensors: dict | None = None) -> dict:
    """config.json for mlx-lm. ``tensors`` maps names to lazily readable arrays (rope factors)."""
    arch = str(meta.get("general.architecture") or "")
    if arch not in SUPPORTED:
        known = ", ".join(sorted(SUPPORTED))
        raise GGUFArchError(
            f"DraftPair cannot convert {arch or 'this'} GGUF models yet (it converts {known})."
        )
    model_type = SUPPORTED[arch]
    if arch == "llama" and meta.get("llama.expert_count"):
        raise GGUFArchError("Mixture-of-experts llama GGUFs (Mixtral) cannot be converted yet.")

    def a(key, default=None):
        return _get(meta, f"{arch}.{key}", default)

    heads = int(a("attention.head_count"))
    hidden = int(a("embedding_length"))
    n_layers = int(a("block_count"))
    head_dim = int(a("attention.key_length") or hidden // heads)
    tokens = meta.get("tokenizer.ggml.tokens") or []
    vocab = int(a("vocab_size") or len(tokens))
    tied = "output.weight" not in tensor_names
    cfg: dict = {
        "architectures": [],
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": int(a("feed_forward_length") or 4 * hidden),
        "num_hidden_layers": n_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": int(a("attention.head_count_kv") or heads),
        "head_dim": head_dim,
        "rms_norm_eps": float(a("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(a("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(a("context_length", 4096)),
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
    }
    for key, meta_key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                          ("pad_token_id", "padding_token_id")):  # fmt: skip
        v = meta.get(f"tokenizer.ggml.{meta_key}")
        if isinstance(v, int):
            cfg[key] = v
    scaling = a("rope.scaling.type")
    factor = a("rope.scaling.factor")
    if scaling in ("linear", "yarn") and factor and float(factor) != 1.0:
        cfg["rope_scaling"] = {"rope_type": scaling, "type": scaling, "factor": float(factor)}
        orig = a("rope.scaling.original_context_length")
        if orig:
            cfg["rope_scaling"]["original_max_position_embeddings"] = int(orig)

    if arch == "llama":
        cfg["architectures"] = ["LlamaForCausalLM"]
        cfg["attention_bias"] = "blk.0.attn_q.bias" in tensor_names
        cfg["mlp_bias"] = "blk.0.ffn_up.bias" in tensor_names
        if "rope_freqs.weight" in tensor_names:
            cfg["rope_scaling"] = _llama3_rope(tensors, cfg)
    elif arch == "qwen2":
        cfg["architectures"] = ["Qwen2ForCausalLM"]
    elif arch == "qwen3":
        cfg["architectures"] = ["Qwen3ForCausalLM"]
    elif arch == "qwen3moe":
        cfg["architectures"] = ["Qwen3MoeForCausalLM"]
        cfg.update(
            num_experts=int(a("expert_count")),
            num_experts_per_tok=int(a("expert_used_count")),
            moe_intermediate_size=int(a("expert_feed_forward_length")),
            decoder_sparse_step=1,
            mlp_only_layers=[],
            norm_topk_prob=True,  # llama.cpp always renormalises the top-k weights
        )
    elif arch in ("gemma2", "gemma3"):
        cfg["hidden_act"] = "gelu_pytorch_tanh"
        cfg["hidden_activation"] = "gelu_pytorch_tanh"
        # llama.cpp scales queries by 1/sqrt(head_dim), except the 27B models (hidden/heads)
        big = (arch == "gemma2" and n_layers == 46) or (arch == "gemma3" and n_layers == 62)
        cfg["query_pre_attn_scalar"] = hidden // heads if big else head_dim
        window = a("attention.sliding_window")
        if window:
            cfg["sliding_window"] = int(window)
        if arch == "gemma2":
            cfg["architectures"] = ["Gemma2ForCausalLM"]
            cfg["attn_logit_softcapping"] = float(a("attn_logit_softcapping", 50.0))
            cfg["final_logit_softcapping"] = float(a("final_logit_softcapping", 30.0))
        else:
            cfg["architectures"] = ["Gemma3ForCausalLM"]
            cfg["sliding_window_pattern"] = 6  # llama.cpp's fixed pattern for Gemma 3
            cfg["rope_local_base_freq"] = 10000.0
            if "rope_scaling" in cfg:
                cfg["rope_scaling"] = {
                    "rope_type": "linear",
                    "factor": cfg["rope_scaling"]["factor"],
                }
        cfg["tie_word_embeddings"] = True
    elif arch == "phi3":
        cfg["architectures"] = ["Phi3ForCausalLM"]
        rot = a("rope.dimension_count")
        if rot:
            cfg["partial_rotary_factor"] = int(rot) / head_dim
        orig = a("rope.scaling.original_context_length")
        if orig:
            cfg["original_max_position_embeddings"] = int(orig)
        if "rope_factors_long.weight" in tensor_names and tensors is not None:
            cfg["rope_scaling"] = {
                "type": "longrope",
                "long_factor": [float(x) for x in tensors["rope_factors_long.weight"]()],
                "short_factor": [float(x) for x in tensors["rope_factors_short.weight"]()],
            }
    return cfg


def _llama3_rope(tensors: dict | None, cfg: dict) -> dict:
    """Recover Llama 3.x rope_scaling from the rope_freqs tensor llama.cpp precomputes."""
    if tensors is None:
        raise GGUFArchError("This GGUF's rope frequencies could not be read.")
    freqs = np.asarray(tensors["rope_freqs.weight"](), dtype=np.float64)
    factor = float(freqs.max())
    dim = cfg["head_dim"]
    base = cfg["rope_theta"]
    inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    for orig in (8192, 4096, 2048, 16384, 32768, 131072):
        for low, high in ((1.0, 4.0), (1.0, 2.0), (2.0, 4.0)):
            wavelen = 2 * np.pi / inv
            low_wl, high_wl = orig / low, orig / high
            smooth = (orig / wavelen - low) / (high - low)
            want = np.where(
                wavelen < high_wl,
                1.0,
                np.where(wavelen > low_wl, factor, 1.0 / ((1 - smooth) / factor + smooth)),
            )
            if want.shape == freqs.shape and np.allclose(want, freqs, rtol=1e-3, atol=1e-3):
                return {
                    "rope_type": "llama3",
                    "factor": factor,
                    "low_freq_factor": low,
                    "high_freq_factor": high,
                    "original_max_position_embeddings": orig,
                }
    raise GGUFArchError("This GGUF uses rope frequency factors DraftPair does not recognise.")


@dataclass
class TensorPlan:
    to_mlx: dict[str, str]  # GGUF tensor name -> mlx-lm parameter name
    shapes: dict[str, tuple[int, ...]]  # mlx-lm parameter name -> shape
    optional: set[str] = field(default_factory=set)  # mlx-lm names that may stay absent


def _skeleton(config: dict):
    """The mlx-lm model for ``config``, with lazy (never evaluated) parameters."""
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    return dict(tree_flatten(model.parameters()))


def tensor_plan(gguf_arch: str, config: dict) -> TensorPlan:
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map

    arch_id = next((k for k, v in MODEL_ARCH_NAMES.items() if v == gguf_arch), None)
    if arch_id is None:
        raise GGUFArchError(f"The installed gguf package does not know {gguf_arch} models.")
    name_map = get_tensor_name_map(arch_id, int(config["num_hidden_layers"]))
    params = _skeleton(config)
    to_mlx: dict[str, str] = {}
    for mlx_name in params:
        base, _, leaf = mlx_name.rpartition(".")
        lookup = base.replace(".switch_mlp.", ".experts.")
        gguf_base = name_map.get_name(lookup)
        if gguf_base is not None:
            to_mlx[f"{gguf_base}.{leaf}"] = mlx_name
    shapes = {k: tuple(v.shape) for k, v in params.items()}
    optional = {"lm_head.weight"} if config.get("tie_word_embeddings") else set()
    if gguf_arch.startswith("gemma"):
        optional.add("lm_head.weight")  # mlx-lm drops it when the file has none
    return TensorPlan(to_mlx=to_mlx, shapes=shapes, optional=optional)


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's ``permute`` of Q/K rows (interleaved -> half-split rotary pairs)."""
    rows = w.shape[0]
    rest = w.shape[1:]
    return w.reshape(n_head, rows // n_head // 2, 2, *rest).swapaxes(1, 2).reshape(rows, *rest)


def fix_tensor(gguf_arch: str, gguf_name: str, w: np.ndarray, config: dict) -> np.ndarray:
    if gguf_arch in PERMUTED_QK:
        if ".attn_q." in gguf_name:
            return _unpermute(w, int(config["num_attention_heads"]))
        if ".attn_k." in gguf_name:
            return _unpermute(w, int(config["num_key_value_heads"]))
    if gguf_arch in NORM_PLUS_ONE and gguf_name.endswith("norm.weight"):
        return w - 1.0
    return w
