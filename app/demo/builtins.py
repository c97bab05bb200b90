"""Register the demo models ("demo", "demo-draft", "demo-mtp", "demo-dflash",
"demo-eagle3") as built-ins
(called at start-up)."""

from __future__ import annotations

from collections.abc import Callable
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


def _present_mtp() -> Path | None:
    from app.demo.mtp_paths import shipped_head_available, shipped_head_path

    return shipped_head_path() if shipped_head_available() else None


MTP_NOTE = ("The MTP head trained for the demo: a small demonstration made by DraftPair, "
            "for the demo model only.")
DFLASH_NOTE = ("The DFlash drafter trained for the demo: a small demonstration made by "
               "DraftPair, for the demo model only.")


EAGLE3_NOTE = ("The EAGLE-3 drafter trained for the demo: a small demonstration made by "
               "DraftPair, for the demo model only.")


def _present_folder(name: str) -> Path | None:
    from app.resources import resource_path

    p = resource_path(name)
    return p if (p / "config.json").is_file() and (p / "model.safetensors").is_file() else None


def _present_dflash() -> Path | None:
    from app.engine.drafters.dflash import DEMO_FOLDER

    return _present_folder(DEMO_FOLDER)


def _present_eagle3() -> Path | None:
    from app.engine.drafters.eagle3 import DEMO_FOLDER

    return _present_folder(DEMO_FOLDER)


def _shipped(present: Callable[[], Path | None], what: str, command: str):
    """``prepare`` for a drafter folder shipped in the resources: nothing to do but find it."""

    def prepare(progress: Progress) -> Path:
        path = present()
        if path is None:
            raise ModelLoadError(f"The {what} trained for the demo is not included in this "
                                 f"DraftPair build (draftpair demo {command} builds one).")
        return path

    return prepare


def register_demo_models() -> None:
    register(Builtin("demo", _prepare_target, _present_target, listed=False,
                     default_draft="demo-draft"))
    register(Builtin("demo-draft", _prepare_draft, _present_draft))
    # the demo target's MTP head: a drafter folder, never offered as a chat model
    register(Builtin("demo-mtp", _shipped(_present_mtp, "MTP head", "mtp-train"),
                     _present_mtp, listed=False, note=MTP_NOTE))
    # the demo target's DFlash drafter: listed, so pickers and checks offer it by name
    register(Builtin("demo-dflash", _shipped(_present_dflash, "DFlash drafter", "train-dflash"),
                     _present_dflash, note=DFLASH_NOTE))
    # the demo target's EAGLE-3 drafter: listed, as the DFlash one
    register(Builtin("demo-eagle3", _shipped(_present_eagle3, "EAGLE-3 drafter",
                                             "train-eagle3"),
                     _present_eagle3, note=EAGLE3_NOTE))
