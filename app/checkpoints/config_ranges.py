"""Settings in config.json checked for range before any model is built: a count of -1 layers,
0 heads or a hidden size of 10^12 is refused by name, not met as a division by zero deep in
mlx-lm.

Public API:
    config_range_problem(config, where="config.json") -> str | None   one plain sentence
    remote_code_tokenizer(folder) -> str | None    the class a tokenizer needs its own code for
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, TypeGuard

# key -> (smallest, largest): counts a real model's settings fall well inside
_COUNTS = {
    "num_hidden_layers": (1, 10_000),
    "num_attention_heads": (1, 65_536),
    "num_key_value_heads": (1, 65_536),
    "hidden_size": (1, 1 << 20),
    "head_dim": (1, 1 << 16),
    "vocab_size": (1, 1 << 24),
    "intermediate_size": (0, 1 << 22),
    "moe_intermediate_size": (0, 1 << 22),
    "max_position_embeddings": (1, 1 << 28),
    "num_experts": (0, 1 << 16),
    "num_local_experts": (0, 1 << 16),
    "n_routed_experts": (0, 1 << 16),
    "num_experts_per_tok": (0, 1 << 16),
}
_POSITIVE = ("rms_norm_eps", "layer_norm_eps", "norm_eps", "rope_theta")
_TOKEN_IDS = ("eos_token_id", "bos_token_id")


def _is_count(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _ids(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def config_range_problem(config: dict, where: str = "config.json") -> str | None:
    """The first setting out of its range, in one sentence; None when all are in range."""
    inner = config.get("text_config")
    merged = {**config, **inner} if isinstance(inner, dict) else config
    for key, (low, high) in _COUNTS.items():
        v = merged.get(key)
        if v is None:
            continue
        if not _is_count(v) or not low <= v <= high:
            shown = f"{v:,}" if _is_count(v) else repr(v)[:40]
            return (f"{where} says {key} is {shown}, but it must be a whole number from "
                    f"{low} to {high:,}.")
    heads, kv = merged.get("num_attention_heads"), merged.get("num_key_value_heads")
    if _is_count(heads) and _is_count(kv) and heads % kv:
        return (f"{where} says num_attention_heads is {heads} and num_key_value_heads is {kv}, "
                "but the first must be a multiple of the second.")
    hidden = merged.get("hidden_size")
    if merged.get("head_dim") is None and _is_count(hidden) and _is_count(heads) and hidden % heads:
        return (f"{where} says hidden_size is {hidden:,} and num_attention_heads is {heads}, but "
                "the first must be a multiple of the second.")
    for key in _POSITIVE:
        v = merged.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not math.isfinite(v) or v <= 0):
            return f"{where} says {key} is {repr(v)[:40]}, but it must be a positive number."
    vocab = merged.get("vocab_size")
    for key in _TOKEN_IDS:
        for v in _ids(merged.get(key)):
            if v is None:
                continue
            if not _is_count(v) or v < 0 or (_is_count(vocab) and v >= vocab):
                top = f"{vocab - 1:,}" if _is_count(vocab) else "the vocabulary's size"
                shown = f"{v:,}" if _is_count(v) else repr(v)[:40]
                return (f"{where} says {key} is {shown}, but token ids run from 0 to {top}.")
    return None


def remote_code_tokenizer(folder: str | Path) -> str | None:
    """The class named in tokenizer_config.json's auto_map when the tokenizer cannot be built
    without the checkpoint's own Python code (which DraftPair never runs), else None."""
    import json

    from app.fileio import read_regular_text

    try:
        cfg = json.loads(read_regular_text(Path(folder) / "tokenizer_config.json",
                                           limit=64 << 20))
    except (OSError, ValueError, RecursionError):
        return None
    auto = cfg.get("auto_map") if isinstance(cfg, dict) else None
    entry = auto.get("AutoTokenizer") if isinstance(auto, dict) else None
    names = [n for n in _ids(entry) if isinstance(n, str) and n]
    if not names:
        return None
    cls = cfg.get("tokenizer_class")
    if isinstance(cls, str) and cls and _known_class(cls):
        return None
    return names[0].split("--")[-1]


def _known_class(name: str) -> bool:
    try:
        from transformers.models.auto.tokenization_auto import tokenizer_class_from_name
    except ImportError:
        return False
    for candidate in (name, f"{name}Fast", name.removesuffix("Fast")):
        try:
            if tokenizer_class_from_name(candidate) is not None:
                return True
        except Exception:  # noqa: BLE001 - an unknown name is simply unknown
            continue
    return False
