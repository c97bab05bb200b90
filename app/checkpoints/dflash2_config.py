"""DFlash 2 drafter folders: a DFlash ``dflash_config`` plus the candidate selector's and the
convolutions' settings, ``model_type: "dflash2"`` (as mlx-vlm 0.7.10 reads them). Plain data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MODEL_TYPE = "dflash2"
ARCHITECTURE = "DFlash2DraftModel"


def is_dflash2(cfg: Mapping[str, Any]) -> bool:
    if not isinstance(cfg, Mapping):
        return False
    archs = cfg.get("architectures") or []
    d = cfg.get("dflash_config")
    return (str(cfg.get("model_type", "")).lower() == MODEL_TYPE
            or (isinstance(archs, list) and ARCHITECTURE in archs)
            or (isinstance(d, Mapping) and "selector_top_k" in d))
