"""Write small but real GGUF files with the ``gguf`` package's GGUFWriter, for import tests.

``write_gguf(path, arch=..., qtypes=...)`` builds a tiny mlx-lm model of that architecture with
random weights (HF layout), writes it the way llama.cpp's converter does (tensor names from
gguf's name map, Q/K rows permuted for llama, ``norm + 1`` for Gemma, real tokenizer metadata)
and returns the *reference* weights: each source tensor after a quantize -> dequantize round
trip through gguf itself, in HF layout. An importer is right when its model equals a float
model built from those.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.builders import CHAT_TEMPLATE, SPECIALS, train_tokenizer

GGML = None  # gguf.GGMLQuantizationType, imported lazily

BASE = dict(
    hidden_size=64, num_hidden_layers=2, intermediate_size=256, num_attention_heads=4,
    num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=512,
)  # fmt: skip
ARCH = {  # gguf arch -> (mlx-lm model_type, extra config)
    "llama": ("llama", {"tie_word_embeddings": False}),
    "qwen2": ("qwen2", {"tie_word_embeddings": True}),
    "qwen3": ("qwen3", {"tie_word_embeddings": True, "head_dim": 16}),
    "qwen3moe": ("qwen3_moe", {
        "tie_word_embeddings": False, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 256, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "norm_topk_prob": True,
    }),
    "gemma3": ("gemma3_text", {  # mlx-lm needs at least one full pattern of 6 layers
        "num_hidden_layers": 6, "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 512,
        "sliding_window_pattern": 6, "rope_theta": 1_000_000.0, "rope_local_base_freq": 10000.0,
    }),
    "gemma2": ("gemma2", {
        "head_dim": 16, "query_pre_attn_scalar": 16, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
    }),
    "phi3": ("phi3", {"tie_word_embeddings": False}),
}  # fmt: skip


def _llamacpp_permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py ``LlamaModel.permute``, verbatim."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def tokenizer_metadata(vocab_size: int = 320):
    """(tokens, token types, merges, bos/eos ids) of the tests' trained byte-level BPE."""
    import json

    tok = train_tokenizer(vocab_size)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for t in data["added_tokens"]:
        vocab[t["content"]] = t["id"]
    tokens = [None] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    types = [3 if t in SPECIALS else 1 for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return tokens, types, merges, tok


def _random_kquant(rows: int, cols: int, qtype, rng) -> np.ndarray:
    """Random but valid K-quant / IQ4_NL blocks (gguf has no quantizer for them), small scales."""
    from gguf import GGML_QUANT_SIZES

    block, nbytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, cols // block, nbytes), dtype=np.uint8)
    if qtype.name == "Q6_K":  # ql, qh, int8 scales, then d (f16) last
        raw[..., -2:] = np.frombuffer(np.float16(1e-4).tobytes(), np.uint8)
    else:  # Q2_K..Q5_K start with d, dmin (f16) except Q3_K/Q2_K (end); set both ends small
        raw[..., :4] = np.frombuffer(np.array([5e-4, 2e-4], np.float16).tobytes(), np.uint8)
        if qtype.name in ("Q2_K", "Q3_K"):
            raw[..., -4:] = np.frombuffer(np.array([5e-4, 2e-4], np.float16).tobytes(), np.uint8)
    return raw.reshape(rows, -1)


def write_gguf(
    path: Path,
    *,
    arch: str = "llama",
    qtypes: dict[str, str] | None = None,
    default_qtype: str = "F32",
    chat_template: str | None = CHAT_TEMPLATE,
    split_max_tensors: int = 0,
    seed: int = 0,
    config_overrides: dict | None = None,
) -> tuple[list[Path], dict, dict[str, np.ndarray]]:
    """Write the file(s); return (paths, mlx-lm config, reference weights by mlx-lm name).

    ``qtypes`` maps a GGUF leaf kind (``attn_q``, ``ffn_down``, ``token_embd``...) to a
    quant type name; K-quant types get random valid blocks (their reference is gguf's own
    dequantization of those blocks).
    """
    import gguf
    import mlx.core as mx
    from gguf import GGMLQuantizationType as Q
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes

    tokens, types, merges, _ = tokenizer_metadata()
    model_type, extra = ARCH[arch]
    config = dict(BASE, model_type=model_type, vocab_size=len(tokens))
    config.update(extra)
    config.update(config_overrides or {})
    model_class, args_class = _get_classes(config)
    mx.random.seed(seed)
    params = dict(tree_flatten(model_class(args_class.from_dict(config)).parameters()))
    rng = np.random.default_rng(seed)
    arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    name_map = gguf.get_tensor_name_map(arch_id, config["num_hidden_layers"])

    path = Path(path)
    writer = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    writer.add_name(f"tiny-{arch}")
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_vocab_size(len(tokens))
    if "head_dim" in config:
        writer.add_key_length(config["head_dim"])
        writer.add_value_length(config["head_dim"])
    if arch == "qwen3moe":
        writer.add_expert_count(config["num_experts"])
        writer.add_expert_used_count(config["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    if arch == "gemma3":
        writer.add_sliding_window(config["sliding_window"])
    if arch == "gemma2":
        writer.add_attn_logit_softcapping(config["attn_logit_softcapping"])
        writer.add_final_logit_softcapping(config["final_logit_softcapping"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    rope = config.get("rope_scaling") or {}
    if rope.get("rope_type") == "llama3":  # llama.cpp LlamaModel.generate_extra_tensors
        dim = config.get("head_dim") or config["hidden_size"] // n_head
        freqs = 1.0 / config["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float32) / dim)
        old, low, high = (rope[k] for k in ("original_max_position_embeddings",
                                            "low_freq_factor", "high_freq_factor"))  # fmt: skip
        factors = []
        for freq in freqs:
            wavelen = 2 * np.pi / freq
            if wavelen < old / high:
                factors.append(1)
            elif wavelen > old / low:
                factors.append(rope["factor"])
            else:
                smooth = (old / wavelen - low) / (high - low)
                factors.append(1 / ((1 - smooth) / rope["factor"] + smooth))
        writer.add_tensor("rope_freqs.weight", np.array(factors, dtype=np.float32))

    if rope.get("type") == "longrope":  # Phi-3 128k: llama.cpp writes the factors as tensors
        writer.add_rope_scaling_orig_ctx_len(config["original_max_position_embeddings"])
        for which in ("long", "short"):
            writer.add_tensor(f"rope_factors_{which}.weight",
                              np.array(rope[f"{which}_factor"], dtype=np.float32))  # fmt: skip

    reference: dict[str, np.ndarray] = {}
    for mlx_name, value in params.items():
        if mlx_name == "lm_head.weight" and arch.startswith("gemma"):
            continue
        base, _, leaf = mlx_name.rpartition(".")
        gguf_name = f"{name_map.get_name(base.replace('.switch_mlp.', '.experts.'))}.{leaf}"
        w = np.array(value, dtype=np.float32)
        if w.ndim == 1:  # norms: random around their init, so their handling is visible
            w = w + rng.normal(0, 0.1, size=w.shape).astype(np.float32)
        kind = gguf_name.split(".")[-2]
        qname = (qtypes or {}).get(kind, default_qtype) if w.ndim >= 2 else "F32"
        qtype = Q[qname]
        stored = w
        if arch == "llama" and kind in ("attn_q", "attn_k"):
            stored = _llamacpp_permute(w, n_head, n_head if kind == "attn_q" else n_kv)
        if arch.startswith("gemma") and gguf_name.endswith("norm.weight"):
            stored = stored + 1.0
        if qname.endswith("_K") or qname.startswith("IQ"):
            assert kind not in ("attn_q", "attn_k"), "K-quant reference is in GGUF row order"
            raw = _random_kquant(int(np.prod(w.shape[:-1])), w.shape[-1], qtype, rng)
            raw = raw.reshape(*w.shape[:-1], -1)
            writer.add_tensor(gguf_name, raw, raw_dtype=qtype)
            reference[mlx_name] = gguf.quants.dequantize(raw, qtype).astype(np.float32)
            continue
        if qname == "F32":
            data, ref_src = stored, w
        elif qname == "F16":
            data, ref_src = stored.astype(np.float16), w.astype(np.float16)
        else:
            data = gguf.quants.quantize(stored, qtype)
            ref_src = gguf.quants.dequantize(gguf.quants.quantize(w, qtype), qtype)
        writer.add_tensor(gguf_name, data, raw_dtype=None if qname in ("F32", "F16") else qtype)
        reference[mlx_name] = np.asarray(ref_src, dtype=np.float32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    files = writer.format_shard_names(path)
    return files, config, reference


def reference_logits(config: dict, reference: dict[str, np.ndarray], ids: list[int]):
    """Logits of the float32 mlx-lm model built from ``reference`` (no cache)."""
    import mlx.core as mx
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    weights = {k: mx.array(v) for k, v in reference.items()}
    sanitize = getattr(model, "sanitize", lambda w: w)
    model.load_weights(list(sanitize(weights).items()), strict=True)
    return model_logits(model, ids)


def model_logits(model, ids: list[int]) -> np.ndarray:
    """(len(ids), V) float32 logits of one forward pass with a fresh prompt cache."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    out = model(mx.array([ids]), cache=make_prompt_cache(model))
    return np.array(out[0].astype(mx.float32))
