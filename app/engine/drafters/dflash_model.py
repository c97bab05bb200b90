"""DFlash block drafter network: config reading (both published schemas) and the MLX module.

Layout as z-lab ships it (weights ``fc``, ``hidden_norm``, ``layers.*``, ``norm``; no
embedding or head): the target's outputs at ``target_layer_ids`` are concatenated, projected
(``fc``, n*H -> H) and normed (``hidden_norm``) into context features. Every layer takes its
queries from the block, its keys/values from ``[context ; block]`` (q/k RMS norms, RoPE, no
causal mask); the context K/V are what the drafter caches. A final ``norm`` feeds the
target's own LM head; the block's embeddings are the target's ``embed_tokens``.

Positions: context row i sits at position i; the block starts right after the cached context
(its first token is the last committed one, at position ``len(committed) - 1``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from app.engine.drafters.folder_weights import fill, read_config_json, read_weights
from app.engine.mlx_types import flat_arrays
from app.errors import DraftPairError

ARCHITECTURE = "DFlashDraftModel"


@dataclass(frozen=True)
class DFlashConfig:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]
    num_target_layers: int
    rope_scaling: dict[str, Any] | None = None
    layer_types: tuple[str, ...] = ()
    sliding_window: int | None = None
    schema: str = "original"  # "original" | "2026" (block_size inside dflash_config)

    def window(self, layer: int) -> int | None:
        """Context positions a layer may see (None: all)."""
        if self.layer_types and self.layer_types[layer] == "sliding_attention":
            return max(int(self.sliding_window or 0) - 1, 1)
        return None


def is_dflash_config(cfg: Mapping[str, Any]) -> bool:
    archs = cfg.get("architectures") or []
    return ARCHITECTURE in archs or isinstance(cfg.get("dflash_config"), Mapping)


def default_layer_ids(num_target_layers: int, n: int) -> list[int]:
    """z-lab's default: ``n`` ids evenly spaced from 1 to N-3 (the middle one when n == 1)."""
    if n == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    return [int(round(start + i * (end - start) / (n - 1))) for i in range(n)]


def read_config(cfg: Mapping[str, Any]) -> DFlashConfig:
    """Both schemas: the original (top-level ``block_size``, ``rope_theta``) and the June 2026
    one (``block_size`` inside ``dflash_config``, ``rope_parameters``, ``layer_types``)."""
    if not is_dflash_config(cfg):
        raise DraftPairError("This folder is not a DFlash drafter (no dflash_config).")
    d = cfg.get("dflash_config") or {}
    if not isinstance(d, Mapping):
        raise DraftPairError("This DFlash drafter's dflash_config is not a table of settings.")

    def need(key: str, *where: Mapping[str, Any]) -> Any:
        for src in where:
            if key in src and src[key] is not None:
                return src[key]
        raise DraftPairError(f"This DFlash drafter's config.json has no {key}.")

    schema = "2026" if "block_size" in d or "rope_parameters" in cfg else "original"
    rope_scaling = cfg.get("rope_scaling")
    rope_theta = cfg.get("rope_theta")
    rp = cfg.get("rope_parameters")
    if isinstance(rp, Mapping):
        rp = dict(rp)
        rope_theta = rp.pop("rope_theta", rope_theta)
        kind = rp.get("rope_type") or rp.get("type") or "default"
        rope_scaling = None if kind == "default" else rp
    if rope_theta is None:
        rope_theta = 10000.0
    layer_ids = tuple(int(i) for i in need("target_layer_ids", d, cfg))
    if not layer_ids:
        raise DraftPairError("This DFlash drafter lists no target layers to read.")
    n_layers = int(need("num_hidden_layers", cfg))
    heads = int(need("num_attention_heads", cfg))
    hidden = int(need("hidden_size", cfg))
    layer_types = tuple(str(t) for t in (cfg.get("layer_types") or ()))
    if layer_types and len(layer_types) != n_layers:
        raise DraftPairError(
            f"This DFlash drafter's layer_types lists {len(layer_types)} layers for "
            f"{n_layers} decoder layers.")
    sliding = cfg.get("sliding_window")
    if "sliding_attention" in layer_types and not sliding:
        raise DraftPairError("This DFlash drafter has sliding layers but no sliding_window.")
    num_target = d.get("num_target_layers", cfg.get("num_target_layers"))
    block = int(need("block_size", d, cfg))
    if block < 2:
        raise DraftPairError(f"This DFlash drafter's block_size is {block}; it needs at least 2.")
    return DFlashConfig(
        hidden_size=hidden,
        num_hidden_layers=n_layers,
        num_attention_heads=heads,
        num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        intermediate_size=int(need("intermediate_size", cfg)),
        vocab_size=int(need("vocab_size", cfg)),
        rms_norm_eps=float(cfg.get("rms_norm_eps") or 1e-6),
        rope_theta=float(rope_theta),
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 32768),
        block_size=block,
        mask_token_id=int(need("mask_token_id", d, cfg)),
        target_layer_ids=layer_ids,
        num_target_layers=int(num_target) if num_target is not None else max(layer_ids) + 1,
        rope_scaling=dict(rope_scaling) if isinstance(rope_scaling, Mapping) else None,
        layer_types=layer_types,
        sliding_window=int(sliding) if sliding else None,
        schema=schema,
    )


def read_config_file(folder: Path) -> DFlashConfig:
    return read_config(read_config_json(folder, "the DFlash drafter"))


def rope_at(x: mx.array, positions: mx.array, base: float) -> mx.array:
    """Split-half (non-traditional) RoPE at explicit positions: x (B, h, L, D), positions
    (B, L). The same rotation as ``nn.RoPE(D, traditional=False, base=base)`` (training path,
    where every block has its own positions)."""
    d = x.shape[-1]
    half = d // 2
    inv = base ** (-mx.arange(0, half, dtype=mx.float32) * 2.0 / d)
    ang = positions.astype(mx.float32)[:, None, :, None] * inv  # (B, 1, L, half)
    cos, sin = mx.cos(ang).astype(x.dtype), mx.sin(ang).astype(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return mx.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


class Attention(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.n_heads, self.n_kv, self.head_dim = (c.num_attention_heads, c.num_key_value_heads,
                                                  c.head_dim)
        self.scale = c.head_dim ** -0.5
        h = c.hidden_size
        self.q_proj = nn.Linear(h, self.n_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.n_kv * c.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.n_kv * c.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * c.head_dim, h, bias=False)
        self.q_norm = nn.RMSNorm(c.head_dim, eps=c.rms_norm_eps)
        self.k_norm = nn.RMSNorm(c.head_dim, eps=c.rms_norm_eps)

    def _heads(self, x: mx.array, n: int) -> mx.array:
        b, length, _ = x.shape
        return x.reshape(b, length, n, -1).transpose(0, 2, 1, 3)

    def project(self, x: mx.array, ctx: mx.array
                ) -> tuple[mx.array, mx.array, mx.array, mx.array, mx.array]:
        """(q, k_block, v_block, k_ctx, v_ctx), heads first, normed, not yet rotated."""
        q = self.q_norm(self._heads(self.q_proj(x), self.n_heads))
        kb = self.k_norm(self._heads(self.k_proj(x), self.n_kv))
        vb = self._heads(self.v_proj(x), self.n_kv)
        kc = self.k_norm(self._heads(self.k_proj(ctx), self.n_kv))
        vc = self._heads(self.v_proj(ctx), self.n_kv)
        return q, kb, vb, kc, vc

    def attend(self, q: mx.array, k: mx.array, v: mx.array,
               mask: mx.array | None = None) -> mx.array:
        o = mx.fast.scaled_dot_product_attention(q, k, v, scale=self.scale, mask=mask)
        return self._out(o)

    def attend_masked(self, q: mx.array, k: mx.array, v: mx.array, mask: mx.array
                      ) -> mx.array:
        """Plain-op attention under a boolean mask (training: its gradient is cheaper on
        CPU than the fused kernel's)."""
        rep = self.n_heads // self.n_kv
        if rep > 1:
            k, v = mx.repeat(k, rep, axis=1), mx.repeat(v, rep, axis=1)
        s = (q * self.scale) @ k.transpose(0, 1, 3, 2)
        s = mx.where(mask, s, mx.array(-1e9, dtype=s.dtype))
        return self._out(mx.softmax(s, axis=-1, precise=True) @ v)

    def _out(self, o: mx.array) -> mx.array:
        b, _, length, _ = o.shape
        out: mx.array = self.o_proj(o.transpose(0, 2, 1, 3).reshape(b, length, -1))
        return out


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        out: mx.array = self.down_proj(nn.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class Layer(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.self_attn = Attention(c)
        self.mlp = MLP(c.hidden_size, c.intermediate_size)
        self.input_layernorm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)

    # the drafting pass's steps around attention and the MLP (DFlash 2 wraps them)
    def attention_input(self, h: mx.array) -> tuple[mx.array, Any]:
        return self.input_layernorm(h), None

    def attention_output(self, o: mx.array, state: Any) -> mx.array:
        return o

    def mlp_step(self, h: mx.array) -> mx.array:
        out: mx.array = self.mlp(self.post_attention_layernorm(h))
        return out


class DFlashModel(nn.Module):
    layer_class: type[Layer] = Layer

    def __init__(self, config: DFlashConfig):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.config = config
        h = config.hidden_size
        self.fc = nn.Linear(len(config.target_layer_ids) * h, h, bias=False)
        self.hidden_norm = nn.RMSNorm(h, eps=config.rms_norm_eps)
        self.layers = [self.layer_class(config) for _ in range(config.num_hidden_layers)]
        self.norm = nn.RMSNorm(h, eps=config.rms_norm_eps)
        from mlx_lm.models.rope_utils import initialize_rope

        self.rope = initialize_rope(config.head_dim, config.rope_theta, False,
                                    config.rope_scaling, config.max_position_embeddings)

    def context(self, features: mx.array) -> mx.array:
        """Target features ``(..., n*H)`` -> context states ``(..., H)``."""
        out: mx.array = self.hidden_norm(self.fc(features))
        return out

    def make_cache(self) -> list[Any]:
        from mlx_lm.models.cache import KVCache

        return [KVCache() for _ in self.layers]

    def __call__(self, block: mx.array, features: mx.array | None, cache: list[Any]
                 ) -> mx.array:
        """One drafting pass. ``block`` (1, L, H) embeddings of ``[last, MASK x (L-1)]``;
        ``features`` (1, S, n*H) target rows of newly committed positions (or None), whose
        K/V are appended to ``cache``; the block's own K/V are not kept. Returns the final
        (normed) states of the block, (1, L, H)."""
        c = self.config
        ctx = self.context(features) if features is not None and features.shape[1] else None
        h = block
        for i, (layer, lc) in enumerate(zip(self.layers, cache, strict=True)):
            a = layer.self_attn
            x, around = layer.attention_input(h)
            q, kb, vb, kc, vc = a.project(x, ctx if ctx is not None else x[:, :0])
            s = kc.shape[2]
            off = lc.offset
            q = self.rope(q, offset=off + s)
            kb = self.rope(kb, offset=off + s)
            if s:
                keys, values = lc.update_and_fetch(self.rope(kc, offset=off), vc)
            elif lc.keys is not None:
                keys, values = lc.keys[..., :lc.offset, :], lc.values[..., :lc.offset, :]
            else:
                keys = values = None
            win = c.window(i)
            if keys is not None and win is not None and keys.shape[2] > win:
                keys, values = keys[:, :, -win:], values[:, :, -win:]
            if keys is not None:
                kb = mx.concatenate([keys, kb], axis=2)
                vb = mx.concatenate([values, vb], axis=2)
            h = h + layer.attention_output(a.attend(q, kb, vb), around)
            h = h + layer.mlp_step(h)
        out: mx.array = self.norm(h)
        return out

    def train_states(self, block: mx.array, positions: mx.array, ctx: mx.array,
                     mask: mx.array) -> mx.array:
        """Training pass over many blocks at once. ``block`` (B, Q, H) embeddings of all
        blocks of a sequence side by side, ``positions`` (B, Q) their positions, ``ctx``
        (B, T, H) context states (``context(features)``) at positions 0..T-1, ``mask``
        (B, 1, Q, T + Q) boolean: what each block row may see (its own block and the context
        before its anchor). Default RoPE only (what the demo drafter uses)."""
        base = self.config.rope_theta
        t = ctx.shape[1]
        ctx_pos = mx.broadcast_to(mx.arange(t)[None], (ctx.shape[0], t))
        h = block
        for layer in self.layers:
            a = layer.self_attn
            q, kb, vb, kc, vc = a.project(layer.input_layernorm(h), ctx)
            q = rope_at(q, positions, base)
            kb = rope_at(kb, positions, base)
            kc = rope_at(kc, ctx_pos, base)
            k = mx.concatenate([kc, kb], axis=2)
            v = mx.concatenate([vc, vb], axis=2)
            h = h + a.attend_masked(q, k, v, mask)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        out: mx.array = self.norm(h)
        return out


def sanitize(weights: dict[str, mx.array]) -> dict[str, mx.array]:
    """z-lab's names, with an optional ``model.`` prefix; embedding/head copies dropped."""
    out = {}
    for k, v in weights.items():
        if k.startswith("model."):
            k = k[len("model."):]
        if k.startswith(("embed_tokens.", "lm_head.")):
            continue
        out[k] = v
    return out


def load_model(folder: Path, dtype: mx.Dtype | None = None) -> DFlashModel:
    """The drafter network from a z-lab-layout folder (config.json + *.safetensors)."""
    folder = Path(folder)
    config = read_config_file(folder)
    weights = sanitize(read_weights(folder, "the DFlash drafter"))
    model = DFlashModel(config)
    fill(model, weights, folder, "the DFlash drafter", dtype, settings="config")
    mx.eval(model.parameters())  # type: ignore[no-untyped-call]  # MLX is not annotated
    return model


def n_params(model: nn.Module) -> int:
    return sum(int(math.prod(v.shape)) for _, v in flat_arrays(model.parameters()))
