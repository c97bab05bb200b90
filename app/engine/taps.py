"""Hidden-state taps: the target's logits plus the hidden states a drafter reads, one pass.

``forward(model, tokens, cache, taps)`` runs the model's own ``__call__`` (so the logits are
exactly what ``model(tokens)`` gives, embeddings scaling, masks and all) while thin wrappers
around the requested decoder layers and the final norm keep their outputs. Nothing is
evaluated here: the rows are lazy arrays of the same graph, so no extra sync and no second
pass. The per-family part is where the decoder stack lives (``FAMILY_PATHS``) and how the
LM head reads the final state (``head``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from app.errors import DraftPairError


@dataclass(frozen=True)
class TapRequest:
    """What hidden states a drafter reads from every target pass."""

    final_prenorm: bool = False  # output of the last decoder layer, before the final norm
    final_postnorm: bool = False  # after the final norm (what the LM head reads)
    layers: tuple[int, ...] = ()  # outputs of these decoder layers (0-based)
    # the K/V the target's KV-shared layers read (Gemma 4): per attention type, those of the
    # last layer of that type that has its own cache, after the pass
    shared_kv: bool = False

    @property
    def empty(self) -> bool:
        return not (self.final_prenorm or self.final_postnorm or self.layers or self.shared_kv)


@dataclass(frozen=True)
class SharedKV:
    """Keys and values ``(1, kv_heads, n, D)`` in position order, the last at position
    ``end - 1`` (a sliding layer's cache holds only its window)."""

    keys: mx.array
    values: mx.array
    end: int


@dataclass(frozen=True)
class Hidden:
    """Rows of one target pass, lazy mx arrays, ``(n, H)`` each; row i predicts token i+1.
    ``shared_kv`` (per attention type) is the target's cache after the pass, not rows: slicing
    rows keeps it whole, and kept conversations do not keep it."""

    final_prenorm: mx.array | None = None
    final_postnorm: mx.array | None = None
    layers: dict[int, mx.array] = field(default_factory=dict)
    shared_kv: dict[str, SharedKV] | None = None

    def rows(self, start: int, stop: int) -> Hidden:
        def cut(a: mx.array | None) -> mx.array | None:
            return None if a is None else a[start:stop]

        return Hidden(cut(self.final_prenorm), cut(self.final_postnorm),
                      {i: a[start:stop] for i, a in self.layers.items()}, self.shared_kv)

    def without_kv(self) -> Hidden:
        return Hidden(self.final_prenorm, self.final_postnorm, self.layers) \
            if self.shared_kv is not None else self

    def kept(self, n_pending: int, path: tuple[int, ...]) -> Hidden:
        """Rows a verify pass keeps: its ``n_pending`` pending tokens' rows, then those of the
        proposal nodes on the accepted ``path`` (a chain's path is a prefix: a slice)."""
        if path == tuple(range(len(path))):
            return self.rows(0, n_pending + len(path))
        idx = mx.array([*range(n_pending), *(n_pending + i for i in path)], dtype=mx.uint32)

        def take(a: mx.array | None) -> mx.array | None:
            return None if a is None else mx.take(a, idx, axis=0)

        return Hidden(take(self.final_prenorm), take(self.final_postnorm),
                      {i: mx.take(a, idx, axis=0) for i, a in self.layers.items()},
                      self.shared_kv)

    @property
    def n(self) -> int:
        for a in (self.final_prenorm, self.final_postnorm, *self.layers.values()):
            if a is not None:
                return int(a.shape[0])
        return 0

    def arrays(self) -> list[mx.array]:
        return [a for a in (self.final_prenorm, self.final_postnorm, *self.layers.values())
                if a is not None]

    @staticmethod
    def concat(parts: list[Hidden]) -> Hidden:
        parts = [p for p in parts if p is not None and p.n]
        if not parts:
            return Hidden()
        if len(parts) == 1:
            return parts[0]

        def cat(get: Callable[[Hidden], mx.array | None]) -> mx.array | None:
            arrs = [get(p) for p in parts]
            present = [a for a in arrs if a is not None]
            if not present:
                return None
            assert len(present) == len(arrs), "every part carries the same taps"
            return mx.concatenate(present, axis=0)

        return Hidden(cat(lambda p: p.final_prenorm), cat(lambda p: p.final_postnorm),
                      {i: mx.concatenate([p.layers[i] for p in parts], axis=0)
                       for i in parts[0].layers}, parts[-1].shared_kv)


# where the decoder stack of each family lives: (path to the stack, layers attr, norm attr).
# qwen3_5 / gemma3 (multimodal wrappers) keep the text model under ``language_model``.
FAMILY_PATHS: dict[str, tuple[str, str, str]] = {
    "llama": ("model", "layers", "norm"),
    "qwen2": ("model", "layers", "norm"),
    "qwen3": ("model", "layers", "norm"),
    "qwen3_moe": ("model", "layers", "norm"),
    "qwen3_next": ("model", "layers", "norm"),
    "qwen3_5": ("language_model.model", "layers", "norm"),
    "qwen3_5_moe": ("language_model.model", "layers", "norm"),
    "gemma3_text": ("model", "layers", "norm"),
    "gemma3": ("language_model.model", "layers", "norm"),
    "deepseek_v3": ("model", "layers", "norm"),
    "mamba2": ("backbone", "layers", "norm_f"),
    "nemotron_h": ("backbone", "layers", "norm_f"),
}
_GENERIC = [("model", "layers", "norm"), ("language_model.model", "layers", "norm"),
            ("backbone", "layers", "norm_f"), ("model", "layers", "final_layernorm")]


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def stack(model: Any) -> tuple[Any, list[Any], str]:
    """(module holding the decoder layers, its layer list, the final norm's attribute)."""
    model_type = str(getattr(model, "model_type", "") or "")
    candidates = [FAMILY_PATHS[model_type]] if model_type in FAMILY_PATHS else []
    for path, layers_attr, norm_attr in candidates + _GENERIC:
        inner = _get(model, path)
        layers = getattr(inner, layers_attr, None) if inner is not None else None
        if isinstance(layers, list) and layers and getattr(inner, norm_attr, None) is not None:
            return inner, layers, norm_attr
    raise DraftPairError(
        f"This drafter needs the target's hidden states, which DraftPair cannot read from "
        f"{model_type or 'this'} models yet."
    )


def norm_dtype(model: Any) -> Any:
    """The dtype of the target's final norm weight (drafters load in it), or None."""
    inner, _, norm_attr = stack(model)
    norm = getattr(getattr(inner, norm_attr, None), "weight", None)
    return norm.dtype if norm is not None else None


def num_layers(model: Any) -> int:
    return len(stack(model)[1])


class _Keep:
    """Calls the wrapped module and keeps its output (the first array when it returns more)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.out: mx.array | None = None
        self.seen: mx.array | None = None  # the input (the final norm's input = prenorm)

    def __getattr__(self, name: str) -> Any:  # the stack reads layer attributes (is_linear...)
        return getattr(self.__dict__["inner"], name)

    def __call__(self, x: mx.array, *args: Any, **kwargs: Any) -> Any:
        self.seen = x
        out = self.inner(x, *args, **kwargs)
        self.out = out[0] if isinstance(out, tuple) else out
        return out


def forward(model: Any, tokens: mx.array, cache: list[Any] | None,
            taps: TapRequest | None) -> tuple[mx.array, Hidden | None]:
    """Raw logits ``(n, V)`` for ``tokens`` (1-D), appended to ``cache``, plus the requested
    hidden rows, computed in the same pass."""
    if taps is None or taps.empty:
        return model(tokens[None], cache=cache)[0], None
    inner, layers, norm_attr = stack(model)
    n_layers = len(layers)
    wanted = sorted({i if i >= 0 else n_layers + i for i in taps.layers})
    if any(not 0 <= i < n_layers for i in wanted):
        raise DraftPairError(f"The drafter reads layer {taps.layers} of a {n_layers}-layer target.")
    keeps = {i: _Keep(layers[i]) for i in wanted}
    norm_keep = None
    if taps.final_prenorm or taps.final_postnorm:
        norm_keep = _Keep(getattr(inner, norm_attr))
    try:
        for i, k in keeps.items():
            layers[i] = k
        if norm_keep is not None:
            object.__setattr__(inner, norm_attr, norm_keep)
        logits = model(tokens[None], cache=cache)[0]
    finally:
        for i, k in keeps.items():
            layers[i] = k.inner
        if norm_keep is not None:
            object.__delattr__(inner, norm_attr)
    def first(a: mx.array | None) -> mx.array:
        assert a is not None, "the wrapped module ran in the pass"
        return a[0]

    hidden = Hidden(
        final_prenorm=first(norm_keep.seen) if norm_keep is not None and taps.final_prenorm
        else None,
        final_postnorm=first(norm_keep.out) if norm_keep is not None and taps.final_postnorm
        else None,
        layers={i: first(keeps[i].out) for i in wanted},
        shared_kv=shared_kv(layers, cache) if taps.shared_kv else None,
    )
    out: mx.array = logits
    return out, hidden


def shared_kv(layers: list[Any], cache: list[Any] | None) -> dict[str, SharedKV]:
    """Per attention type, the K/V of the last layer of that type with a cache of its own
    (what a Gemma 4 model's KV-shared layers, and its MTP assistant, read), in position
    order. Read after the pass: slices, so later writes to the cache do not show."""
    if not cache:
        raise DraftPairError("This drafter reads the target's shared attention cache, which "
                             "this target does not keep.")
    out: dict[str, SharedKV] = {}
    for layer, c in zip(layers, cache, strict=False):
        kind = getattr(layer, "layer_type", None)
        if c is None or kind is None or getattr(c, "keys", None) is None:
            continue
        keys, values = c.keys, c.values
        order = getattr(c, "_temporal_order", None)
        if order is not None:  # a sliding window's rotating cache
            keys, values = order(keys), order(values)
            n = min(int(keys.shape[2]), int(c.offset))
        else:
            n = int(c.offset)
        out[str(kind)] = SharedKV(keys[..., :n, :], values[..., :n, :], int(c.offset))
    return out


def head(model: Any, h: mx.array) -> mx.array:
    """The target's LM head applied to final (post-norm) states ``h`` -> raw logits."""
    owner = model
    for path in ("language_model", ""):
        cand = _get(model, path) if path else model
        if cand is not None and (getattr(cand, "lm_head", None) is not None
                                 or getattr(cand, "args", None) is not None):
            owner = cand
            break
    args = getattr(owner, "args", None)
    tied = bool(getattr(args, "tie_word_embeddings", False)) or getattr(
        owner, "tie_word_embeddings", False)
    lm_head = getattr(owner, "lm_head", None)
    out: mx.array
    if lm_head is not None and not tied:
        out = lm_head(h)
    else:
        inner, _, _ = stack(model)
        embed = getattr(inner, "embed_tokens", None) or getattr(inner, "embeddings", None)
        if embed is None:
            raise DraftPairError("DraftPair cannot find this target's token embeddings.")
        out = embed.as_linear(h)
    cap = getattr(args, "final_logit_softcapping", None)
    if cap:
        out = mx.tanh(out / cap) * cap
    return out
