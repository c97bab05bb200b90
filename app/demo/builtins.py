"""Register the demo pair ("demo", "demo-draft") as built-in models (called at start-up)."""

from __future__ import annotations

from pathlib import Path

from app.checkpoints.builtins import Builtin, Progress, register
from app.errors import ModelLoadError, user_message

NOT_BUILT = "The built-in demo model is not part of this DraftPair build."


def _target():
    try:
        import app.demo.target as target
    except ImportError:  # a build without the demo
        raise ModelLoadError(NOT_BUILT) from None
    return target


def _prepare_target(progress: Progress) -> Path:
    target = _target()
    try:
        return Path(target.ensure_demo_target(progress))
    except ModelLoadError:
        raise
    except Exception as exc:  # noqa: BLE001 - one plain line for the user
        raise ModelLoadError(
            f"The built-in demo model could not be prepared: {user_message(exc)}"
        ) from None


def _present_target() -> Path | None:
    target = _target()
    return target.demo_target_dir() if target.demo_target_ready() else None


def _prepare_draft(progress: Progress) -> Path:
    path = Path(_target().demo_draft_path())
    if not (path / "config.json").is_file():
        raise ModelLoadError("The built-in demo draft is not included in this DraftPair build.")
    return path


def _present_draft() -> Path | None:
    target = _target()
    return Path(target.demo_draft_path()) if target.demo_draft_available() else None


def register_demo_models() -> None:
    register(Builtin("demo", _prepare_target, _present_target, listed=False,
                     default_draft="demo-draft"))
    register(Builtin("demo-draft", _prepare_draft, _present_draft))
