"""The target's pass over a tree proposal, two ways.

- **One pass** (targets whose every layer is attention over a plain KV cache: llama, qwen2/3,
  mistral...): the pending tokens and every node are fed together; each decoder layer gets a
  tree attention mask instead of the causal one, and each attention's rotary embedding places
  a node at its depth (the rotary module is called with one offset per token, by moving the
  tokens to the batch axis, which ``mx.fast.rope`` rotates each at its own offset). The model
  code is not changed: its layers and rotary modules are wrapped for the pass, as the taps do.
  The cache then holds every node; the rollback gathers the accepted path's rows.
- **Paths side by side** (sliding windows, recurrent and hybrid targets, other families): the
  cache is copied once per leaf along the batch axis and every root-to-leaf path is fed as one
  row of a batch (padded at the end); the target's own cache is left as it was, and after the
  verdict the pending tokens and the accepted path are fed to it (a second, short pass).
  Costs: a batch of ``leaves x (pending + depth)`` tokens, then ``pending + accepted``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, QuantizedKVCache, RotatingKVCache

from app.engine import taps, tree
from app.engine.taps import Hidden, TapRequest

ONE_PASS, PATHS = "one pass", "paths side by side"

# families whose decoder layers are ``layer(x, mask, cache)`` over one kind of attention
_MASKABLE = {"llama", "qwen2", "qwen3", "qwen3_moe", "mistral"}


def method(model: Any, cache: list[Any]) -> str:
    """How this target verifies trees."""
    kinds_ok = all(type(c) in (KVCache, QuantizedKVCache) for c in cache)
    family = str(getattr(model, "model_type", "") or "")
    if not kinds_ok or family not in _MASKABLE:
        return PATHS
    try:
        _, layers, _ = taps.stack(model)
    except Exception:
        return PATHS
    if not all(getattr(getattr(ly, "self_attn", None), "rope", None) is not None
               for ly in layers):
        return PATHS
    return ONE_PASS


class _Masked:
    """A decoder layer called with the tree's mask in place of the causal one."""

    def __init__(self, inner: Any, mask: mx.array):
        self.inner = inner
        self.mask = mask

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["inner"], name)

    def __call__(self, x: mx.array, *args: Any, **kwargs: Any) -> Any:
        if "mask" in kwargs:
            kwargs["mask"] = self.mask
        elif args:
            args = (self.mask, *args[1:])
        else:
            kwargs["mask"] = self.mask
        return self.inner(x, *args, **kwargs)


class _PerTokenRope:
    """A rotary module that rotates fed token ``j`` at ``offset + rel[j]``."""

    def __init__(self, inner: Any, rel: list[int]):
        self.inner = inner
        self.rel = rel
        self.rel_arr = mx.array(rel, dtype=mx.int32)
        self.batched = isinstance(inner, nn.RoPE) or type(inner).__name__ == "Llama3RoPE"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["inner"], name)

    def __call__(self, x: mx.array, offset: Any = 0) -> mx.array:
        n = x.shape[-2]
        if self.batched and x.shape[0] == 1:
            # (1, H, n, D) -> (n, H, 1, D): one token per batch row, each at its own offset
            pos = self.rel_arr[:n] + offset
            out: mx.array = self.inner(x.transpose(2, 1, 0, 3), offset=pos)
            return out.transpose(2, 1, 0, 3)
        # any other rotary module: one call per distinct shift, each token taken from its own
        shifts = [r - j for j, r in enumerate(self.rel[:n])]
        result: mx.array | None = None
        for s in sorted(set(shifts)):
            rotated = self.inner(x, offset=offset + s)
            sel = mx.array([sh == s for sh in shifts])[None, None, :, None]
            result = rotated if result is None else mx.where(sel, rotated, result)
        assert result is not None
        return result


@contextmanager
def _tree_wrapped(model: Any, mask: mx.array, rel: list[int]) -> Iterator[None]:
    _, layers, _ = taps.stack(model)
    originals = list(layers)
    ropes = [ly.self_attn.rope for ly in originals]
    try:
        for ly, r in zip(originals, ropes, strict=True):
            ly.self_attn.rope = _PerTokenRope(r, rel)
        for i, ly in enumerate(originals):
            layers[i] = _Masked(ly, mask)
        yield
    finally:
        for i, ly in enumerate(originals):
            layers[i] = ly
        for ly, r in zip(originals, ropes, strict=True):
            ly.self_attn.rope = r


def forward_one_pass(model: Any, inputs: mx.array, parents: tuple[int, ...], n_pending: int,
                     cache: list[Any], tap: TapRequest | None,
                     ) -> tuple[mx.array, Hidden | None]:
    """Raw logits ``(n_pending + k, V)`` for the pending tokens then the nodes, the cache
    holding every fed token (node rows at their depth's position)."""
    offset = int(cache[0].offset)
    mask = tree.attention_mask(parents, n_pending, offset)
    rel = tree.rel_positions(parents, n_pending)
    with _tree_wrapped(model, mask, rel):
        return taps.forward(model, inputs, cache, tap)


# -- paths side by side ----------------------------------------------------------------------


def _tiled(c: Any, b: int) -> Any:
    def tile(a: mx.array | None) -> mx.array | None:
        return None if a is None else mx.repeat(a, b, axis=0)

    if isinstance(c, CacheList):
        out = copy.copy(c)
        out.caches = tuple(_tiled(x, b) for x in c.caches)
        return out
    out = copy.copy(c)
    if isinstance(c, ArraysCache):
        out.cache = [tile(a) for a in c.cache]
        if getattr(c, "lengths", None) is not None:
            out.lengths = tile(c.lengths)
        return out
    if isinstance(c, (KVCache, RotatingKVCache)):
        out.keys, out.values = tile(c.keys), tile(c.values)
        return out
    raise TypeError(f"cannot copy a {type(c).__name__} per path")


def forward_paths(model: Any, pending: list[int], tokens: list[int],
                  parents: tuple[int, ...], cache: list[Any]) -> mx.array:
    """Raw logits: the row after the last pending token (when any is pending), then each
    node's row, from every root-to-leaf path fed as one batch row of a copy of ``cache``."""
    paths = [tree.ancestors(parents, leaf) for leaf in tree.leaves(parents)]
    n_p = len(pending)
    width = n_p + max(len(p) for p in paths)
    batch = [pending + [tokens[i] for i in p] + [0] * (width - n_p - len(p)) for p in paths]
    copies = [_tiled(c, len(paths)) for c in cache]
    logits = model(mx.array(batch, dtype=mx.uint32), cache=copies)  # (B, width, V)
    where: dict[int, tuple[int, int]] = {}
    for b, p in enumerate(paths):
        for j, node in enumerate(p):
            where.setdefault(node, (b, n_p + j))
    rows = ([logits[0, n_p - 1]] if n_p else []) + [logits[where[i][0], where[i][1]]
                                                    for i in range(len(parents))]
    return mx.stack(rows)


def _moved(a: mx.array, start: int, idx: mx.array) -> mx.array:
    a[..., start : start + int(idx.shape[0]), :] = mx.take(a, idx, axis=2)
    return a


def keep_path(cache: list[Any], n_pending: int, n_nodes: int, path: tuple[int, ...]) -> None:
    """After a one-pass tree verify: keep the pending tokens and the accepted ``path``'s rows
    (gathered to sit right after them), drop every other node."""
    for c in cache:
        end = int(c.offset)
        start = end - n_nodes  # the first node's row
        if path != tuple(range(len(path))):
            idx = mx.array([start + i for i in path], dtype=mx.int32)
            if isinstance(c.keys, tuple):  # quantized: (data, scales, biases)
                c.keys = tuple(_moved(a, start, idx) for a in c.keys)
                c.values = tuple(_moved(a, start, idx) for a in c.values)
            else:
                c.keys, c.values = _moved(c.keys, start, idx), _moved(c.values, start, idx)
        c.offset = start + len(path)
