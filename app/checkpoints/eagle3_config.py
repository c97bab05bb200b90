"""EAGLE-3 drafter folders: recognising both published layouts and reading their settings.

Two layouts are in circulation:

- the original one (``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``): a flat Llama-style config with
  ``architectures: ["LlamaForCausalLMEagle3"]`` and ``draft_vocab_size``; its one layer is
  stored as ``midlayer.*``; the target layers it reads are not written down (the paper's
  choice, low / middle / high: ``[2, n // 2, n - 3]`` of an ``n``-layer target);
- vLLM's ``speculators`` format (``RedHatAI/Qwen3-8B-speculator.eagle3``): the layer's settings
  under ``transformer_layer_config``, ``speculators_model_type: "eagle3"``, the layers it reads
  as ``eagle_aux_hidden_state_layer_ids`` and the target it was made for under
  ``speculators_config.verifier``; its layer is stored as ``layers.0.*``.

Layer ids count as Hugging Face's ``hidden_states`` do (0 = the embeddings, ``i`` = the output
of decoder layer ``i - 1``), which is how both trainers record them. Plain data, no MLX.
"""

from __future__ import annotations

from typing import Any

ORIGINAL = "original"
SPECULATORS = "speculators"
FORMAT_NAME = "eagle3"  # how speculators and architecture names spell the algorithm


def _archs(config: dict[str, Any]) -> list[str]:
    archs = config.get("architectures") or []
    return [str(a) for a in archs] if isinstance(archs, list) else [str(archs)]


def is_eagle3(config: dict[str, Any]) -> bool:
    if not isinstance(config, dict):
        return False
    if str(config.get("speculators_model_type", "")).lower() == FORMAT_NAME:
        return True
    spec = config.get("speculators_config")
    if isinstance(spec, dict) and str(spec.get("algorithm", "")).lower() == FORMAT_NAME:
        return True
    return any(FORMAT_NAME in a.lower() for a in _archs(config))


def default_layer_ids(n_target_layers: int) -> list[int]:
    """The paper's low / middle / high layers of an ``n``-layer target."""
    n = n_target_layers
    return [2, n // 2, n - 3]


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def eagle3_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """Normalized EAGLE-3 settings, or None if the folder is not an EAGLE-3 drafter.

    Keys: layout, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
    head_dim, intermediate_size, rms_norm_eps, rope_theta, vocab_size (the target's),
    draft_vocab_size, target_hidden_size, layer_ids (None: the paper's default),
    norm_before_residual, norm_before_fc, verifier_archs, verifier_name, speculative_tokens.
    """
    if not is_eagle3(config):
        return None
    inner = config.get("transformer_layer_config")
    layout = SPECULATORS if isinstance(inner, dict) else ORIGINAL
    layer: dict[str, Any] = inner if isinstance(inner, dict) else config
    hidden = _int(layer.get("hidden_size"))
    heads = _int(layer.get("num_attention_heads"))
    rope_raw = layer.get("rope_parameters")
    rope: dict[str, Any] = rope_raw if isinstance(rope_raw, dict) else {}
    rope_theta = rope.get("rope_theta", layer.get("rope_theta", 10000.0))
    vocab = _int(layer.get("vocab_size")) or _int(config.get("vocab_size"))
    draft_vocab = _int(config.get("draft_vocab_size")) or _int(layer.get("draft_vocab_size"))
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if ids is None:
        ids = config.get("target_layer_ids")  # some conversions name them so
    spec_raw = config.get("speculators_config")
    spec: dict[str, Any] = spec_raw if isinstance(spec_raw, dict) else {}
    ver_raw = spec.get("verifier")
    verifier: dict[str, Any] = ver_raw if isinstance(ver_raw, dict) else {}
    methods = spec.get("proposal_methods")
    first: dict[str, Any] = methods[0] if isinstance(methods, list) and methods and isinstance(
        methods[0], dict) else {}
    v_archs = verifier.get("architectures") or []
    return {
        "layout": layout,
        "hidden_size": hidden,
        "num_hidden_layers": _int(layer.get("num_hidden_layers")) or 1,
        "num_attention_heads": heads,
        "num_key_value_heads": _int(layer.get("num_key_value_heads")) or heads,
        "head_dim": _int(layer.get("head_dim")) or (hidden // heads if hidden and heads else None),
        "intermediate_size": _int(layer.get("intermediate_size")),
        "rms_norm_eps": float(layer.get("rms_norm_eps", 1e-6)),
        "rope_theta": float(rope_theta) if isinstance(rope_theta, (int, float)) else 10000.0,
        "attention_bias": bool(layer.get("attention_bias", False)),
        "vocab_size": vocab,
        "draft_vocab_size": draft_vocab or vocab,
        "target_hidden_size": _int(config.get("target_hidden_size")) or hidden,
        "layer_ids": [int(i) for i in ids] if isinstance(ids, list) and all(
            _int(i) is not None for i in ids) else None,
        "norm_before_residual": bool(config.get("norm_before_residual", False)),
        "norm_before_fc": bool(config.get("norm_before_fc", False)),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", False)),
        "verifier_archs": [str(a) for a in v_archs] if isinstance(v_archs, list) else [],
        "verifier_name": str(verifier.get("name_or_path") or "") or None,
        "speculative_tokens": _int(first.get("speculative_tokens")),
    }


def reads_layers(cfg: dict[str, Any], n_target_layers: int) -> list[int]:
    """The target's ``hidden_states`` indices the drafter reads, in the order it reads them."""
    ids = cfg.get("layer_ids")
    return sorted(ids) if ids else default_layer_ids(n_target_layers)
