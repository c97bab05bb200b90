"""EAGLE-3 drafter network: its settings (both published layouts) and the MLX module.

One Llama-style decoder layer whose attention reads ``[embed(token) ; hidden]`` (twice the
width). ``hidden`` is either the target's three tapped layers concatenated and projected by
``fc`` (3*H_target -> H), or, when drafting further ahead, the drafter's own previous output.
The pair (target row of position ``i``, token ``i + 1``) sits at draft position ``i + 1``;
its output, normed and read by the drafter's ``lm_head`` over its reduced vocabulary, predicts
token ``i + 2``; ``d2t`` maps a draft id ``j`` to target id ``j + d2t[j]``. The embedding is
the target's own (the drafter's copy, when it ships one, is used only when they differ).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import create_attention_mask, scaled_dot_product_attention
from mlx_lm.models.cache import KVCache

from app.checkpoints.eagle3_config import eagle3_config
from app.engine.drafters.dflash_model import MLP
from app.engine.drafters.folder_weights import fill, read_config_json, read_weights
from app.errors import DraftPairError


@dataclass(frozen=True)
class Eagle3Config:
    layout: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    layer_ids: tuple[int, ...] | None
    norm_before_residual: bool = False
    norm_before_fc: bool = False
    attention_bias: bool = False
    tie_word_embeddings: bool = False
    verifier_archs: tuple[str, ...] = ()
    verifier_name: str | None = None

    @property
    def reduced(self) -> bool:
        return self.draft_vocab_size != self.vocab_size


def read_config(raw: dict[str, Any], folder: Path | None = None) -> Eagle3Config:
    cfg = eagle3_config(raw)
    where = f" in {folder}" if folder is not None else ""
    if cfg is None:
        raise DraftPairError(f"The folder{where} is not an EAGLE-3 drafter.")
    need = ("hidden_size", "num_attention_heads", "head_dim", "intermediate_size", "vocab_size")
    missing = [k for k in need if not cfg.get(k)]
    if missing:
        raise DraftPairError(f"The EAGLE-3 drafter's settings{where} are incomplete "
                             f"({', '.join(missing)} missing).")
    return Eagle3Config(
        layout=cfg["layout"], hidden_size=cfg["hidden_size"],
        num_hidden_layers=cfg["num_hidden_layers"],
        num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"], head_dim=cfg["head_dim"],
        intermediate_size=cfg["intermediate_size"], rms_norm_eps=cfg["rms_norm_eps"],
        rope_theta=cfg["rope_theta"], vocab_size=cfg["vocab_size"],
        draft_vocab_size=cfg["draft_vocab_size"], target_hidden_size=cfg["target_hidden_size"],
        layer_ids=tuple(cfg["layer_ids"]) if cfg["layer_ids"] else None,
        norm_before_residual=cfg["norm_before_residual"], norm_before_fc=cfg["norm_before_fc"],
        attention_bias=cfg["attention_bias"], tie_word_embeddings=cfg["tie_word_embeddings"],
        verifier_archs=tuple(cfg["verifier_archs"]), verifier_name=cfg["verifier_name"],
    )


class Attention(nn.Module):
    def __init__(self, c: Eagle3Config, in_dim: int):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.n_heads, self.n_kv, self.head_dim = (c.num_attention_heads, c.num_key_value_heads,
                                                  c.head_dim)
        self.scale = c.head_dim ** -0.5
        bias = c.attention_bias
        self.q_proj = nn.Linear(in_dim, self.n_heads * c.head_dim, bias=bias)
        self.k_proj = nn.Linear(in_dim, self.n_kv * c.head_dim, bias=bias)
        self.v_proj = nn.Linear(in_dim, self.n_kv * c.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * c.head_dim, c.hidden_size, bias=bias)
        self.rope = nn.RoPE(c.head_dim, traditional=False, base=c.rope_theta)

    def __call__(self, x: mx.array, position: int, cache: KVCache) -> mx.array:
        b, n, _ = x.shape
        q = self.q_proj(x).reshape(b, n, self.n_heads, -1).transpose(0, 2, 1, 3)
        k = self.k_proj(x).reshape(b, n, self.n_kv, -1).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(b, n, self.n_kv, -1).transpose(0, 2, 1, 3)
        q = self.rope(q, offset=position)
        k = self.rope(k, offset=position)
        k, v = cache.update_and_fetch(k, v)
        mask = create_attention_mask(x, cache)
        out = scaled_dot_product_attention(q, k, v, cache, scale=self.scale, mask=mask)
        o: mx.array = self.o_proj(out.transpose(0, 2, 1, 3).reshape(b, n, -1))
        return o


class Layer(nn.Module):
    """A decoder layer; the first one reads ``[embed ; hidden]`` (``first``)."""

    def __init__(self, c: Eagle3Config, first: bool):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.first = first
        self.norm_before_residual = c.norm_before_residual
        self.input_layernorm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        if first:
            self.hidden_norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.self_attn = Attention(c, 2 * c.hidden_size if first else c.hidden_size)
        self.post_attention_layernorm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.mlp = MLP(c.hidden_size, c.intermediate_size)

    def __call__(self, h: mx.array, embeds: mx.array | None, position: int,
                 cache: KVCache) -> mx.array:
        if self.first:
            assert embeds is not None
            normed = self.hidden_norm(h)
            residual = normed if self.norm_before_residual else h
            x = mx.concatenate([self.input_layernorm(embeds), normed], axis=-1)
        else:
            residual, x = h, self.input_layernorm(h)
        h = residual + self.self_attn(x, position, cache)
        out: mx.array = h + self.mlp(self.post_attention_layernorm(h))
        return out


class Eagle3Model(nn.Module):
    def __init__(self, c: Eagle3Config):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.config = c
        self.fc = nn.Linear(3 * c.target_hidden_size, c.hidden_size, bias=False)
        if c.norm_before_fc:
            self.input_norm = nn.RMSNorm(3 * c.target_hidden_size, eps=c.rms_norm_eps)
        self.layers = [Layer(c, i == 0) for i in range(c.num_hidden_layers)]
        self.norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.draft_vocab_size, bias=False)

    def make_cache(self) -> list[KVCache]:
        return [KVCache() for _ in self.layers]

    def project(self, features: mx.array) -> mx.array:
        """The target's three concatenated rows -> the drafter's hidden width."""
        if self.config.norm_before_fc:
            features = self.input_norm(features)
        out: mx.array = self.fc(features)
        return out

    def __call__(self, embeds: mx.array, hidden: mx.array, position: int,
                 cache: list[KVCache]) -> mx.array:
        """``embeds`` (1, n, H) of the tokens, ``hidden`` (1, n, H) already projected (or the
        drafter's own outputs), first at draft ``position``; returns the outputs (1, n, H)."""
        h = hidden
        for layer, c in zip(self.layers, cache, strict=True):
            h = layer(h, embeds, position, c)
        return h

    def logits(self, h: mx.array) -> mx.array:
        """Raw logits over the draft vocabulary."""
        out: mx.array = self.lm_head(self.norm(h))
        return out

    def train_steps(self, embeds: list[mx.array], features: mx.array) -> list[mx.array]:
        """The training-time test of the EAGLE-3 paper over one sequence: ``features``
        (n, 3*H_target) are the target rows of positions 0..n-1, ``embeds[j]`` (n, H) the
        embeddings of the tokens at positions 1+j..n+j (step j's inputs). Step 0 reads the
        target's rows (the pairs of drafting); step j > 0 reads step j-1's outputs, as a chain
        of drafting does, and chain p (started from the pair at position p+1) attends to the
        pairs at positions <= p+1 and to its own earlier steps only. Returns each step's
        outputs (n, H); row p of step j predicts the token at position p+2+j."""
        from app.engine.drafters.dflash_model import rope_at

        n = int(features.shape[0])
        h = self.project(features)[None]
        base = mx.arange(1, n + 1)
        causal = base[:, None] >= base[None, :]  # step 0: pairs at positions <= own
        eye = mx.eye(n, dtype=mx.bool_)
        kv: list[list[tuple[mx.array, mx.array]]] = [[] for _ in self.layers]
        outs = []
        for j, e in enumerate(embeds):
            pos = (base + j)[None]
            mask = mx.concatenate([causal] + [eye] * j, axis=1)[None, None]
            x = h
            for li, layer in enumerate(self.layers):
                a = layer.self_attn
                if layer.first:
                    normed = layer.hidden_norm(x)
                    residual = normed if layer.norm_before_residual else x
                    inp = mx.concatenate([layer.input_layernorm(e[None]), normed], axis=-1)
                else:
                    residual, inp = x, layer.input_layernorm(x)
                q = a.q_proj(inp).reshape(1, n, a.n_heads, -1).transpose(0, 2, 1, 3)
                k = a.k_proj(inp).reshape(1, n, a.n_kv, -1).transpose(0, 2, 1, 3)
                v = a.v_proj(inp).reshape(1, n, a.n_kv, -1).transpose(0, 2, 1, 3)
                base_theta = float(self.config.rope_theta)
                q, k = rope_at(q, pos, base_theta), rope_at(k, pos, base_theta)
                kv[li].append((k, v))
                keys = mx.concatenate([kk for kk, _ in kv[li]], axis=2)
                values = mx.concatenate([vv for _, vv in kv[li]], axis=2)
                rep = a.n_heads // a.n_kv
                if rep > 1:
                    keys, values = mx.repeat(keys, rep, axis=1), mx.repeat(values, rep, axis=1)
                scores = (q * a.scale) @ keys.transpose(0, 1, 3, 2)
                scores = mx.where(mask, scores, mx.array(-1e9, dtype=scores.dtype))
                o = mx.softmax(scores, axis=-1, precise=True) @ values
                o = a.o_proj(o.transpose(0, 2, 1, 3).reshape(1, n, -1))
                x = residual + o
                x = x + layer.mlp(layer.post_attention_layernorm(x))
            outs.append(x[0])
            h = x
        return outs


def sanitize(weights: dict[str, mx.array]) -> tuple[dict[str, mx.array], dict[str, mx.array]]:
    """(network weights, extras: ``d2t``, ``t2d``, ``embed_tokens``), names of either layout."""
    net: dict[str, mx.array] = {}
    extra: dict[str, mx.array] = {}
    for k, v in weights.items():
        k = k.removeprefix("model.")
        if k.startswith("verifier_") or "rotary_emb" in k:
            continue
        if k in ("d2t", "t2d"):
            extra[k] = v
        elif k == "embed_tokens.weight":
            extra["embed_tokens"] = v
        elif k.startswith("midlayer."):
            net["layers.0." + k[len("midlayer."):]] = v
        else:
            net[k] = v
    return net, extra


@dataclass
class Eagle3Weights:
    model: Eagle3Model
    d2t: mx.array | None  # (draft_vocab,) int32 offsets; None when the vocabularies agree
    has_t2d: bool
    embed: mx.array | None  # the drafter's own embedding, when its folder ships one


def load_model(folder: Path, dtype: mx.Dtype | None = None) -> Eagle3Weights:
    folder = Path(folder)
    raw = read_config_json(folder, "the EAGLE-3 drafter")
    config = read_config(raw if isinstance(raw, dict) else {}, folder)
    net, extra = sanitize(read_weights(folder, "the EAGLE-3 drafter"))
    if "lm_head.weight" not in net and config.tie_word_embeddings and not config.reduced \
            and "embed_tokens" in extra:
        net["lm_head.weight"] = extra["embed_tokens"]
    model = Eagle3Model(config)
    fill(model, net, folder, "the EAGLE-3 drafter", dtype)
    d2t = extra["d2t"].astype(mx.int32) if "d2t" in extra else None
    embed = extra.get("embed_tokens")
    if embed is not None and dtype is not None:
        embed = embed.astype(dtype)
    mx.eval(model.parameters())  # type: ignore[no-untyped-call]  # MLX is not annotated
    return Eagle3Weights(model=model, d2t=d2t, has_t2d="t2d" in extra, embed=embed)
