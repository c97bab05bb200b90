"""The multi-token-prediction head: one extra decoder layer that reads the target's state.

For position ``i`` the head takes the embedding of token ``t_{i+1}`` and the target's hidden
state ``h_i`` (the row whose LM-head output predicts ``t_{i+1}``), normalises each, projects
the concatenation back to the model width (``fc``, 2H -> H), runs one decoder layer of the
target's own kind with its own KV cache, applies a final norm and the target's shared output
layer, and so predicts ``t_{i+2}``. For more proposals it chains on its own output state.

This is the Qwen3.5 / Qwen3-Next ``mtp`` module; DeepSeek-V3 / GLM NextN layers are the same
computation under other names (``enorm``, ``hnorm``, ``eh_proj``, ``shared_head.norm``), see
``mtp_weights.py``. Which target state ``h_i`` is (before or after the target's final norm)
is a property of how the head was trained, set per family (``HIDDEN_BY_FAMILY``) or by the
head's own folder.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import mlx.nn as nn

PRENORM = "prenorm"
POSTNORM = "postnorm"

# Which target state each family's released heads were trained on. Qwen3.5 / Qwen3-Next read
# the state the LM head reads (llama.cpp moved to it after measuring lower acceptance on the
# pre-norm state; mlx-vlm's qwen3_5_mtp passes the normed state); DeepSeek-V3 and GLM NextN
# read the last layer's output before the final norm.
HIDDEN_BY_FAMILY = {
    "qwen3_5": POSTNORM,
    "qwen3_5_moe": POSTNORM,
    "qwen3_next": POSTNORM,
    "deepseek_v3": PRENORM,
    "deepseek_v32": PRENORM,
    "glm4_moe": PRENORM,
    "glm4_moe_lite": PRENORM,
}


def inner_model(model: nn.Module) -> nn.Module:
    """The module holding ``embed_tokens``, ``layers`` and ``norm``."""
    lm = getattr(model, "language_model", model)
    inner = getattr(lm, "model", lm)
    if not hasattr(inner, "embed_tokens"):
        raise AttributeError(f"no embed_tokens in {type(model).__name__}")
    return cast(nn.Module, inner)


def text_args(model: nn.Module) -> Any:
    """The ModelArgs the decoder layers were built from (text part of a VLM-style model)."""
    lm = getattr(model, "language_model", model)
    args = getattr(lm, "args", None) or getattr(model, "args", None)
    if args is None:
        raise AttributeError(f"no args on {type(model).__name__}")
    return args


def attention_layer_index(model: nn.Module) -> int:
    """Index of the last full-attention decoder layer (hybrid models mix in linear ones)."""
    layers = inner_model(model).layers
    for i in range(len(layers) - 1, -1, -1):
        if not getattr(layers[i], "is_linear", False):
            return i
    raise ValueError("the model has no attention layer")


def new_layer_like(model: nn.Module) -> nn.Module:
    """A fresh decoder layer of the same class and shape as the target's last attention layer."""
    idx = attention_layer_index(model)
    cls = type(inner_model(model).layers[idx])
    args = text_args(model)
    params = inspect.signature(cls).parameters
    kwargs: dict[str, Any] = {}
    if "layer_idx" in params:
        kwargs["layer_idx"] = idx
    first = next(iter(params))
    kwargs[first] = args
    layer: nn.Module = cls(**kwargs)
    return layer


class MTPModule(nn.Module):
    """Weights in the Qwen3.5 naming (``fc``, ``pre_fc_norm_*``, ``layers.0``, ``norm``)."""

    def __init__(self, layer: nn.Module, hidden_size: int, eps: float):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.fc = nn.Linear(2 * hidden_size, hidden_size, bias=False)
        self.pre_fc_norm_embedding = nn.RMSNorm(hidden_size, eps=eps)
        self.pre_fc_norm_hidden = nn.RMSNorm(hidden_size, eps=eps)
        self.layers = [layer]
        self.norm = nn.RMSNorm(hidden_size, eps=eps)

    def __call__(self, embeds: mx.array, hidden: mx.array, cache: list[Any] | None = None,
                 mask: Any = None) -> tuple[mx.array, mx.array]:
        """``embeds``, ``hidden``: (B, L, H). Returns (state before ``norm``, after ``norm``)."""
        from mlx_lm.models.base import create_attention_mask

        h = mx.concatenate(
            [self.pre_fc_norm_embedding(embeds), self.pre_fc_norm_hidden(hidden)], axis=-1)
        h = self.fc(h)
        caches = cache if cache is not None else [None] * len(self.layers)
        for layer, c in zip(self.layers, caches, strict=True):
            m = mask
            if m is None and h.shape[1] > 1:
                m = create_attention_mask(h, c) if c is not None else "causal"
            h = layer(h, mask=m, cache=c)
        return h, self.norm(h)


@dataclass
class MTPHead:
    """A loaded head bound to its target: the module plus how to feed and read it."""

    module: MTPModule
    hidden_state: str  # PRENORM | POSTNORM: which target state it reads
    source: str  # plain words: where the weights came from
    layout: str  # "qwen3_5" | "nextn" | "split" | "demo"
    head_ids: mx.array | None = None  # reduced output head: target ids of its rows
    head_weight: mx.array | None = None  # (len(head_ids), H) rows of the target's head
    info: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None  # the drafter folder it was read from (None: the target's files)

    @property
    def reads(self) -> str:
        return self.hidden_state

    def chain_state(self, pre: mx.array, post: mx.array) -> mx.array:
        """The head's own output state that stands in for the target's in the next step."""
        return post if self.hidden_state == POSTNORM else pre


def target_head(model: nn.Module) -> Callable[[mx.array], mx.array]:
    """The target's output layer: its LM head, or its embedding read as one (tied)."""
    lm = getattr(model, "language_model", model)
    head = getattr(lm, "lm_head", None) or getattr(model, "lm_head", None)
    out: Callable[[mx.array], mx.array] = (
        head if head is not None else inner_model(model).embed_tokens.as_linear)
    return out


class BoundHead:
    """Embedding, MTP module and output layer of one head on one target, ready to step."""

    def __init__(self, head: MTPHead, target_model: nn.Module):
        self.head = head
        inner = inner_model(target_model)
        self.embed = inner.embed_tokens
        self.embed_scale = float(getattr(inner, "embed_scale", 1.0))
        self.full_head = target_head(target_model)
        self.ids = head.head_ids
        self.weight = head.head_weight

    def embeds(self, tokens: mx.array) -> mx.array:
        e: mx.array = self.embed(tokens)
        return e * self.embed_scale if self.embed_scale != 1.0 else e

    def step(self, tokens: mx.array, hidden: mx.array, cache: list[Any] | None,
             last_only: bool = False) -> tuple[mx.array, mx.array]:
        """Tokens (L,) and hidden rows (L, H) -> (head logits (L, V'), chain state (L, H));
        ``last_only``: of the last row only (pairing a prompt needs no other row's logits,
        and the output layer is as dear as the decoder layer)."""
        emb = self.embeds(tokens.astype(mx.uint32))[None]
        pre, post = self.head.module(emb, hidden[None].astype(emb.dtype), cache)
        pre, post = (pre[0, -1:], post[0, -1:]) if last_only else (pre[0], post[0])
        return self.logits(post), self.head.chain_state(pre, post)

    def logits(self, post: mx.array) -> mx.array:
        out: mx.array = post @ self.weight.T if self.weight is not None else self.full_head(post)
        return out

    def to_target_ids(self, ids: mx.array) -> mx.array:
        out: mx.array = self.ids[ids] if self.ids is not None else ids
        return out

    def to_target_probs(self, q: mx.array, vocab: int) -> mx.array:
        if self.ids is not None:
            return mx.zeros((q.shape[0], vocab), q.dtype).at[:, self.ids].add(q)
        if q.shape[-1] < vocab:
            return mx.concatenate([q, mx.zeros((q.shape[0], vocab - q.shape[-1]), q.dtype)], -1)
        return q[:, :vocab]
