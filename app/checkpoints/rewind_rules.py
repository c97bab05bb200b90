"""Which caches the engine cannot rewind, as plain sentences (no MLX import: the pairing
check reads it from a checkpoint's config alone; ``app.engine.rollback`` from live caches)."""

from __future__ import annotations

# families whose mlx-lm cache is of a kind no rollback strategy handles (model_type -> cache)
UNREWINDABLE_FAMILIES = {"deepseek_v41": "LayerCache"}


def reason(type_names: list[str]) -> str:
    return (f"the model's {', '.join(type_names)} cache cannot be rewound after a rejected "
            "draft")


def config_problem(config: dict) -> str | None:
    """Why speculation cannot rewind this checkpoint's cache (None if it can)."""
    inner = config.get("text_config")
    cfg = inner if isinstance(inner, dict) else config
    for model_type in (str(config.get("model_type") or ""), str(cfg.get("model_type") or "")):
        if model_type in UNREWINDABLE_FAMILIES:
            return reason([UNREWINDABLE_FAMILIES[model_type]])
    return None
