"""DSpark drafter folders: a DFlash-style ``dflash_config`` with ``projector_type: "dspark"``
and a low-rank token-transition ("Markov") head, ``model_type: "dspark"`` or the
``Qwen3DSparkModel`` architecture (as mlx-vlm 0.7.10 reads them). Plain data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MODEL_TYPE = "dspark"
ARCHITECTURES = ("Qwen3DSparkModel", "DSparkDraftModel")


def is_dspark(cfg: Mapping[str, Any]) -> bool:
    if not isinstance(cfg, Mapping):
        return False
    archs = cfg.get("architectures") or []
    d = cfg.get("dflash_config")
    return (str(cfg.get("model_type", "")).lower() == MODEL_TYPE
            or (isinstance(archs, list) and any(a in archs for a in ARCHITECTURES))
            or (isinstance(d, Mapping) and (d.get("projector_type") == MODEL_TYPE
                                            or "markov_rank" in d)))
