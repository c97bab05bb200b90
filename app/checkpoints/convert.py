"""Convert a Hugging Face (safetensors) checkpoint to MLX format with mlx_lm.convert.

Public API:
    convert(source, *, quantize=False, bits=4, group_size=64, dtype=None, dest=None,
            store=None, on_message=None, on_download=None, cancel=None) -> Path
        source: a local folder or a repo id (downloaded first, without pickle or code files).
        Never trust_remote_code, never reads .bin/.pt. Raises ConvertError (plain message).
        A multi-token-prediction head (which mlx-lm drops) is kept in ``dest/mtp/``.
    default_output_name(source, quantize, bits) -> str
"""

from __future__ import annotations

import contextlib
import io
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from app.errors import DraftPairError

if TYPE_CHECKING:
    from app.checkpoints.hub import DownloadProgress
    from app.checkpoints.store import Store


class ConvertError(DraftPairError):
    pass


def default_output_name(source: str, quantize: bool, bits: int) -> str:
    base = (
        Path(source.rstrip("/")).name
        if "/" not in source or Path(source).exists()
        else source.split("/")[-1]
    )
    return f"{base}-mlx-{bits}bit" if quantize else f"{base}-mlx"


def _source_folder(source: str, on_download, cancel) -> Path:
    path = Path(source).expanduser()
    if path.exists():
        return path
    from app.checkpoints.resolve import hf_cached_snapshot

    snap = hf_cached_snapshot(source)
    if snap is not None:
        return snap
    from app.checkpoints.hub import download

    return download(source, progress=on_download, cancel=cancel)


def convert(
    source: str,
    *,
    quantize: bool = False,
    bits: int = 4,
    group_size: int = 64,
    dtype: str | None = None,
    dest: Path | None = None,
    store: Store | None = None,
    on_message: Callable[[str], None] | None = None,
    on_download: Callable[[DownloadProgress], None] | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    say = on_message or (lambda _m: None)
    src = _source_folder(str(source), on_download, cancel)
    if not src.is_dir() or not (src / "config.json").is_file():
        raise ConvertError(f"{src} is not a model folder (no config.json).")
    from app.checkpoints.inspect import inspect_checkpoint

    info = inspect_checkpoint(src, read_tokenizer_files=False)
    if info.config is None:
        raise ConvertError(f"{src}: {info.config_error}")
    w = info.weights
    if not w or not w.files:
        if w and w.pickle_files:
            raise ConvertError(
                "This model only has pickle weights (.bin/.pt), which DraftPair never loads."
            )
        raise ConvertError("This model has no safetensors weights to convert.")
    if w.errors:
        raise ConvertError(f"Its weight files are damaged: {w.errors[0]}")
    if info.config.get("model_file"):
        raise ConvertError("This model needs its own Python code, which DraftPair never runs.")
    if not info.arch_supported:
        raise ConvertError(
            f"mlx-lm cannot convert {info.model_type or 'this architecture'} models."
        )
    if quantize and info.quantization:
        raise ConvertError(f"This model is already quantized ({info.quantization}).")
    if dest is None:
        if store is None:
            from app.checkpoints.store import Store

            store = Store()
        dest = store.models_dir / default_output_name(str(source), quantize, bits)
    dest = Path(dest)
    if dest.exists():
        raise ConvertError(f"{dest} already exists; remove it or choose another output folder.")
    dest.parent.mkdir(parents=True, exist_ok=True)
    say(f"Converting {src} -> {dest}" + (f" ({bits}-bit)" if quantize else ""))
    from mlx_lm.convert import convert as mlx_convert

    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            mlx_convert(
                str(src),
                str(dest),
                quantize=quantize,
                q_bits=bits if quantize else None,
                q_group_size=group_size if quantize else None,
                dtype=dtype,
                trust_remote_code=False,
            )
    except Exception as exc:  # noqa: BLE001 - the user gets one plain line
        shutil.rmtree(dest, ignore_errors=True)
        from app.errors import user_message

        raise ConvertError(f"Conversion failed: {user_message(exc)}") from None
    for py in dest.glob("*.py"):  # never keep code next to weights
        py.unlink()
    if info.mtp_tensors:  # mlx-lm drops the multi-token-prediction head: keep it beside
        from app.checkpoints.mtp_source import copy_local

        try:
            copy_local(src, dest, on_message=say)
        except (DraftPairError, OSError, ValueError) as exc:
            shutil.rmtree(dest, ignore_errors=True)  # never a conversion that lost its head
            from app.errors import user_message

            raise ConvertError("Keeping the multi-token-prediction head failed: "
                               f"{user_message(exc)}") from None
    say(f"Saved {dest}")
    return dest
