"""DFlash 2 drafter network: DFlash's block drafter plus grouped dynamic causal convolutions
around every layer's attention and MLP, and a candidate selector that picks each block
position's token among the LM head's top ``selector_top_k`` by adding a low-rank score for the
pair (previous token, candidate) to its logit, left to right. The pick is the argmax: DFlash 2
drafts deterministically by design (its proposals are verified as such at any temperature).

Settings: DFlash's (``dflash_config``: block_size, mask_token_id, target_layer_ids) plus
``conv_kernel_size``, ``conv_group_size``, ``selector_rank``, ``selector_top_k``,
``input_embedding_scale``, ``output_multiplier``, ``final_logit_softcapping`` inside
``dflash_config``; ``model_type: "dflash2"``. As mlx-vlm 0.7.10 reads them
(``speculative/drafters/dflash2/``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from app.engine.drafters.dflash_model import DFlashConfig, DFlashModel, Layer, read_config
from app.engine.drafters.folder_weights import fill, read_config_json, read_weights
from app.errors import DraftPairError


@dataclass(frozen=True)
class DFlash2Extras:
    conv_kernel_size: int
    conv_group_size: int
    selector_rank: int
    selector_top_k: int
    input_embedding_scale: float = 1.0
    output_multiplier: float = 1.0
    final_logit_softcapping: float | None = None


def read_extras(cfg: Mapping[str, Any]) -> DFlash2Extras:
    d = cfg.get("dflash_config")
    d = d if isinstance(d, Mapping) else {}

    def need(key: str) -> int:
        v = d.get(key, cfg.get(key))
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise DraftPairError(f"This DFlash 2 drafter's config.json has no valid {key}.")
        return v

    cap = d.get("final_logit_softcapping", cfg.get("final_logit_softcapping"))
    return DFlash2Extras(
        conv_kernel_size=need("conv_kernel_size"), conv_group_size=need("conv_group_size"),
        selector_rank=need("selector_rank"), selector_top_k=need("selector_top_k"),
        input_embedding_scale=float(d.get("input_embedding_scale", 1.0)),
        output_multiplier=float(d.get("output_multiplier", 1.0)),
        final_logit_softcapping=float(cap) if isinstance(cap, (int, float)) else None,
    )


def _convolve(hidden: mx.array, dynamic: mx.array, base: mx.array, group: int) -> mx.array:
    """Causal along the block: position t mixes positions t - j (j < kernel) with per-group
    weights ``base[j] + dynamic[t, j]``."""
    b, n, h = hidden.shape
    groups = h // group
    blocks = hidden.reshape(b, n, groups, group)
    dyn = dynamic.reshape(b, n, base.shape[0], groups, 1)
    out = mx.zeros_like(blocks)
    for j in range(base.shape[0]):
        shifted = blocks if j == 0 else mx.concatenate(
            [mx.zeros_like(blocks[:, :j]), blocks[:, :-j]], axis=1)
        kernel = base[j].reshape(1, 1, groups, group).astype(hidden.dtype)
        out = out + (kernel + dyn[:, :, j]) * shifted
    return out.reshape(hidden.shape)


class DynamicConv(nn.Module):
    def __init__(self, hidden: int, kernel: int, group: int):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.kernel_size, self.group_size = kernel, group
        self.base_kernel = mx.zeros((2, kernel, hidden))
        self.kernel_projection = nn.Linear(hidden, 2 * kernel * (hidden // group), bias=False)

    def prepare(self, x: mx.array) -> tuple[mx.array, mx.array]:
        groups = x.shape[-1] // self.group_size
        dyn = self.kernel_projection(x).reshape(*x.shape[:-1], 2, self.kernel_size, groups)
        return (_convolve(x, dyn[..., 0, :, :], self.base_kernel[0], self.group_size),
                dyn[..., 1, :, :])

    def finish(self, x: mx.array, dyn: mx.array) -> mx.array:
        return _convolve(x, dyn, self.base_kernel[1], self.group_size)


def _layer_class(extras: DFlash2Extras) -> type[Layer]:
    class Layer2(Layer):
        def __init__(self, c: DFlashConfig):
            super().__init__(c)
            k, g = extras.conv_kernel_size, extras.conv_group_size
            self.attention_conv = DynamicConv(c.hidden_size, k, g)
            self.mlp_conv = DynamicConv(c.hidden_size, k, g)

        def attention_input(self, h: mx.array) -> tuple[mx.array, Any]:
            return self.attention_conv.prepare(self.input_layernorm(h))

        def attention_output(self, o: mx.array, state: Any) -> mx.array:
            return self.attention_conv.finish(o, state)

        def mlp_step(self, h: mx.array) -> mx.array:
            x, dyn = self.mlp_conv.prepare(self.post_attention_layernorm(h))
            return self.mlp_conv.finish(self.mlp(x), dyn)

    return Layer2


class CandidateSelector(nn.Module):
    def __init__(self, vocab: int, hidden: int, extras: DFlash2Extras):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.top_k = extras.selector_top_k
        self.predecessor_codebook = nn.Embedding(vocab, extras.selector_rank)
        self.successor_codebook = nn.Embedding(vocab, extras.selector_rank)
        self.hidden_projection = nn.Linear(hidden, extras.selector_rank, bias=False)

    def select(self, states: mx.array, logits: mx.array, anchor: int) -> mx.array:
        """Tokens (n,) for block states (n, H) with logits (n, V), after token ``anchor``."""
        cands = mx.argpartition(logits, -self.top_k, axis=-1)[:, -self.top_k:]
        unary = mx.take_along_axis(logits, cands, axis=-1)
        proj = self.hidden_projection(states)
        prev = mx.array([anchor], dtype=mx.uint32)
        path = []
        for i in range(states.shape[0]):
            edges = mx.sum(self.predecessor_codebook(prev)[:, None] * proj[i][None, None]
                           * self.successor_codebook(cands[i])[None], axis=-1)
            pick = mx.argmax(unary[i][None] + edges, axis=-1)
            prev = cands[i][pick]
            path.append(prev)
        return mx.concatenate(path).astype(mx.uint32)


class DFlash2Model(DFlashModel):
    def __init__(self, config: DFlashConfig, extras: DFlash2Extras):
        self.layer_class = _layer_class(extras)
        super().__init__(config)
        self.extras = extras
        self.candidate_selector = CandidateSelector(config.vocab_size, config.hidden_size,
                                                    extras)


def sanitize(weights: dict[str, mx.array]) -> dict[str, mx.array]:
    out = {}
    for k, v in weights.items():
        k = k.removeprefix("model.")
        if k.startswith(("embed_tokens.", "lm_head.")):
            continue
        if k in ("candidate_selector.predecessor_codebook",
                 "candidate_selector.successor_codebook"):
            k += ".weight"
        out[k] = v
    return out


def load_model(folder: Path, dtype: mx.Dtype | None = None) -> DFlash2Model:
    folder = Path(folder)
    cfg = read_config_json(folder, "the DFlash 2 drafter")
    if not isinstance(cfg, dict):
        raise DraftPairError(f"The DFlash 2 drafter's config.json in {folder} is not a table.")
    config, extras = read_config(cfg), read_extras(cfg)
    if config.hidden_size % extras.conv_group_size:
        raise DraftPairError("This DFlash 2 drafter's conv_group_size does not divide its "
                             "hidden size.")
    if extras.selector_top_k > config.vocab_size:
        raise DraftPairError("This DFlash 2 drafter's selector_top_k is larger than its "
                             "vocabulary.")
    weights = read_weights(folder, "the DFlash 2 drafter")
    model = DFlash2Model(config, extras)
    fill(model, sanitize(weights), folder, "the DFlash 2 drafter", dtype)
    mx.eval(model.parameters())  # type: ignore[no-untyped-call]  # MLX is not annotated
    return model
