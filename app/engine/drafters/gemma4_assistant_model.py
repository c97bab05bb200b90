"""Gemma 4's MTP assistant network: a few Gemma 4 decoder layers with no K/V of their own.
Each step reads ``[target embedding of the last token ; previous state]`` (the target's final
normed state first, then the assistant's own projected one), projects it to the assistant's
width, attends over the target's shared K/V (per attention type, the cache of the target's
last layer of that type, as the target's KV-shared layers do) at one fixed position, and
predicts the next token from its own tied embedding. Layers are mlx-lm's ``gemma4_text``
decoder layers with every layer KV-shared (what the Hugging Face config does when
``num_kv_shared_layers`` is unset). Ordered (centroid) embeddings are not run yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import gemma4_text

from app.checkpoints.gemma4_assistant_config import is_gemma4_assistant
from app.engine.drafters.folder_weights import fill, read_config_json, read_weights
from app.errors import DraftPairError


@dataclass(frozen=True)
class AssistantConfig:
    backbone_hidden_size: int
    tie_word_embeddings: bool
    text: gemma4_text.ModelArgs

    @property
    def vocab_size(self) -> int:
        return int(self.text.vocab_size)


def read_config(cfg: dict[str, Any]) -> AssistantConfig:
    if not is_gemma4_assistant(cfg):
        raise DraftPairError("This folder is not a Gemma 4 assistant.")
    if cfg.get("use_ordered_embeddings"):
        raise DraftPairError("This Gemma 4 assistant predicts through ordered (centroid) "
                             "embeddings, which DraftPair does not run yet.")
    text = cfg.get("text_config")
    backbone = cfg.get("backbone_hidden_size")
    if not isinstance(text, dict) or not isinstance(backbone, int):
        raise DraftPairError("The Gemma 4 assistant's settings are incomplete (text_config, "
                             "backbone_hidden_size).")
    text = dict(text)
    text["num_kv_shared_layers"] = int(text.get("num_hidden_layers") or 0)
    text.setdefault("hidden_size_per_layer_input", 0)
    try:
        args = gemma4_text.ModelArgs.from_dict(text)
    except (TypeError, ValueError) as exc:
        raise DraftPairError("The Gemma 4 assistant's text_config cannot be read.") from exc
    return AssistantConfig(backbone, bool(cfg.get("tie_word_embeddings", True)), args)


class _Inner(nn.Module):
    def __init__(self, args: gemma4_text.ModelArgs):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = [gemma4_text.DecoderLayer(args, i) for i in range(args.num_hidden_layers)]
        self.norm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)


class AssistantModel(nn.Module):
    def __init__(self, c: AssistantConfig):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.config = c
        h = c.text.hidden_size
        self.model = _Inner(c.text)
        self.pre_projection = nn.Linear(2 * c.backbone_hidden_size, h, bias=False)
        self.post_projection = nn.Linear(h, c.backbone_hidden_size, bias=False)
        if not c.tie_word_embeddings:
            self.lm_head = nn.Linear(h, c.text.vocab_size, bias=False)

    @property
    def layer_types(self) -> list[str]:
        return [str(t) for t in self.config.text.layer_types or []]

    def step(self, inputs: mx.array, shared: dict[str, tuple[mx.array, mx.array]],
             masks: dict[str, mx.array | None], position: int) -> tuple[mx.array, mx.array]:
        """``inputs`` (1, 1, 2*backbone) -> (next state (1, 1, backbone), logits (1, 1, V))."""
        h = self.pre_projection(inputs)
        offset = mx.array(position)
        for layer in self.model.layers:
            kind = str(layer.layer_type)
            h, _, _ = layer(h, masks.get(kind), None, per_layer_input=None,
                            shared_kv=shared[kind], offset=offset)
        h = self.model.norm(h)
        logits = self.lm_head(h) if not self.config.tie_word_embeddings \
            else self.model.embed_tokens.as_linear(h)
        out: mx.array = self.post_projection(h)
        return out, logits


def swa_mask(position: int, kv_len: int, valid: int, window: int,
             dtype: mx.Dtype) -> mx.array | None:
    """mlx-vlm's bidirectional sliding-window mask for one query, on the window's local
    positions (the query at ``min(position, kv_len)``)."""
    q = min(position, kv_len)
    v = min(valid, kv_len)
    if kv_len <= window and q < window and kv_len - (q + 1) < window:
        return None
    k = mx.arange(kv_len)
    dist = q - k
    inside = (dist > -window) & (dist < window) & (k < v)
    bias = mx.where(inside, mx.array(0.0, dtype=dtype), mx.array(-mx.inf, dtype=dtype))
    return bias[None, None, None, :]


def load_model(folder: Path, dtype: mx.Dtype | None = None) -> AssistantModel:
    folder = Path(folder)
    raw = read_config_json(folder, "the Gemma 4 assistant")
    config = read_config(raw if isinstance(raw, dict) else {})
    weights = read_weights(folder, "the Gemma 4 assistant")
    if config.tie_word_embeddings:
        weights.pop("lm_head.weight", None)
    model = AssistantModel(config)
    fill(model, weights, folder, "the Gemma 4 assistant", dtype)
    mx.eval(model.parameters())  # type: ignore[no-untyped-call]  # MLX is not annotated
    return model
