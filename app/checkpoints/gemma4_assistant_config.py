"""Gemma 4 MTP assistant folders (``gemma-4-*-it-assistant``): ``model_type:
"gemma4_assistant"``, the target's width as ``backbone_hidden_size``, the assistant's own
layers under ``text_config`` (as mlx-vlm 0.7.10 and Hugging Face read them). Plain data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MODEL_TYPE = "gemma4_assistant"
TARGET_TYPES = ("gemma4", "gemma4_text")


def is_gemma4_assistant(cfg: Mapping[str, Any]) -> bool:
    if not isinstance(cfg, Mapping):
        return False
    archs = cfg.get("architectures") or []
    return (str(cfg.get("model_type", "")).lower() == MODEL_TYPE
            or (isinstance(archs, list) and any("Gemma4Assistant" in str(a) for a in archs)))


def assistant_settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The few settings pairing needs: backbone width, vocabulary, ordered embeddings."""
    text = cfg.get("text_config")
    text = text if isinstance(text, Mapping) else {}
    return {
        "backbone_hidden_size": cfg.get("backbone_hidden_size"),
        "vocab_size": text.get("vocab_size", cfg.get("vocab_size")),
        "use_ordered_embeddings": bool(cfg.get("use_ordered_embeddings", False)),
        "num_hidden_layers": text.get("num_hidden_layers"),
    }
