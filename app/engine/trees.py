"""MLX parameter trees with precise types: ``mlx.utils.tree_flatten`` is annotated as
returning a list or a dict, so each caller would otherwise narrow it by hand."""

from __future__ import annotations

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
