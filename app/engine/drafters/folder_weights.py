"""Reading a drafter folder (config.json + *.safetensors) into its network, with one plain
sentence naming the drafter (``who``, e.g. "the DFlash drafter") when a step fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from app.engine.mlx_types import load_arrays
from app.errors import DraftPairError


def _sentence(who: str) -> str:
    return who[0].upper() + who[1:]


def read_config_json(folder: Path, who: str) -> Any:
    try:
        return json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DraftPairError(f"Cannot read {who}'s config.json in {folder}.") from exc


def read_weights(folder: Path, who: str) -> dict[str, mx.array]:
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise DraftPairError(f"{_sentence(who)} in {folder} has no weights (*.safetensors).")
    weights: dict[str, mx.array] = {}
    for f in files:
        weights.update(load_arrays(f))
    return weights


def fill(model: nn.Module, weights: dict[str, mx.array], folder: Path, who: str,
         dtype: mx.Dtype | None, *, settings: str = "settings") -> None:
    """Load ``weights`` into ``model`` (all of them, no more), in ``dtype`` when given."""
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as exc:
        raise DraftPairError(
            f"{_sentence(who)}'s weights do not match its {settings} ({Path(folder).name}).") \
            from exc
    if dtype is not None:
        model.set_dtype(dtype)
