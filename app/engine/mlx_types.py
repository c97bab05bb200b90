"""Precise types where MLX's annotations leave them open, so callers need no casts:
``mlx.utils.tree_flatten`` is annotated as returning a list or a dict, ``array.tolist()`` as
any nesting of numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx


def flat_items(tree: Any) -> list[tuple[str, Any]]:
    """``(dotted name, leaf)`` for every leaf of ``tree`` (``tree_flatten``'s list form)."""
    from mlx.utils import tree_flatten

    out: list[tuple[str, Any]] = []
    tree_flatten(tree, destination=out)
    return out


def flat_arrays(tree: Any) -> list[tuple[str, mx.array]]:
    """The arrays among ``tree``'s leaves, by dotted name (a module's ``parameters()``)."""
    return [(k, v) for k, v in flat_items(tree) if isinstance(v, mx.array)]


def int_list(a: mx.array) -> list[int]:
    """The integers of a 1-D array (token ids)."""
    values: Any = a.tolist()
    return [int(v) for v in values]


def int_rows(a: mx.array) -> list[list[int]]:
    """The integers of a 2-D array, row by row."""
    rows: Any = a.tolist()
    return [[int(v) for v in row] for row in rows]


def float_rows(a: mx.array) -> list[list[float]]:
    """The numbers of a 2-D array, row by row."""
    rows: Any = a.tolist()
    return [[float(v) for v in row] for row in rows]


def item_int(a: mx.array) -> int:
    """The integer a one-element array holds."""
    value: Any = a.item()
    return int(value)


def bool_list(a: mx.array) -> list[bool]:
    """The truth values of a 1-D array."""
    values: Any = a.tolist()
    return [bool(v) for v in values]


def load_arrays(path: str | Path) -> dict[str, mx.array]:
    """The named arrays of a ``.safetensors`` or ``.npz`` file (``mx.load``'s annotation also
    allows a single array or a tuple with metadata)."""
    out = mx.load(str(path))
    if not isinstance(out, dict):
        raise ValueError(f"{path} holds no named arrays")
    return out


def load_lm(path: str | Path) -> tuple[Any, Any]:
    """``mlx_lm.load``'s model and tokenizer (its annotation also allows a third item, the
    config, which it returns only when asked)."""
    from mlx_lm import load

    loaded = load(str(path))
    return loaded[0], loaded[1]


def item_float(a: mx.array) -> float:
    """The real number a one-element array holds."""
    value: Any = a.item()
    return float(value)


def float_list(a: mx.array) -> list[float]:
    """The real numbers of a 1-D array."""
    values: Any = a.tolist()
    return [float(v) for v in values]
