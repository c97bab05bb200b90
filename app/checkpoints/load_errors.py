"""A failed mlx-lm load of a checkpoint folder, in plain words (names the damaged file).

Public API:
    explain_load_failure(exc, folder) -> ModelLoadError   the weights or config did not load
    tokenizer_failure(exc, folder) -> str                 the tokenizer did not load
"""

from __future__ import annotations

import json
from pathlib import Path

from app.errors import (
    DraftPairError,
    ModelLoadError,
    names_a_setting,
    technical_detail,
    user_message,
)
from app.fileio import JSON_LIMIT, read_regular_text


def explain_load_failure(exc: BaseException, folder: str | Path) -> ModelLoadError:
    """A failed mlx-lm load of ``folder`` as one plain sentence; names the damaged file."""
    folder = Path(folder)
    detail = technical_detail(exc)
    file = None
    text = str(exc)
    if "[read]" in text or "[load_safetensors]" in text or "json.exception" in text:
        file = _damaged_weight_file(folder)
    model_type = None
    try:
        cfg = json.loads(read_regular_text(folder / "config.json", limit=JSON_LIMIT))
        model_type = cfg.get("model_type") if isinstance(cfg, dict) else None
    except (OSError, ValueError):
        pass
    if isinstance(exc, FileNotFoundError) and "No safetensors" in text:
        msg = (f"{folder} has no weight files named model*.safetensors, the only names "
               "mlx-lm reads; rename the weight files.")
    else:
        msg = user_message(exc, folder=folder, file=file, model_type=model_type)
    return ModelLoadError(msg, detail=detail)


def _damaged_weight_file(folder: Path) -> Path | None:
    from app.checkpoints.safetensors_header import HeaderError, read_header

    for f in sorted(folder.glob("*.safetensors")):
        try:
            read_header(f)
        except HeaderError:
            return f
    return None


def tokenizer_failure(exc: BaseException, folder: str | Path) -> str:
    """Why the tokenizer of ``folder`` did not load, in one sentence."""
    if names_a_setting(exc):
        return user_message(exc, folder=folder)
    from app.checkpoints.tokenizer_files import has_tokenizer_files

    if not has_tokenizer_files(Path(folder)):
        return f"{folder} has no tokenizer files, so text cannot be turned into tokens."
    if isinstance(exc, (UnicodeDecodeError, ValueError)) and not isinstance(exc, DraftPairError):
        return f"The tokenizer files in {folder} are damaged (not valid text or JSON)."
    return (f"The tokenizer files in {folder} cannot be read "
            f"({user_message(exc, folder=folder).rstrip('.')}).")
