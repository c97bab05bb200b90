"""Where the demo MTP head's training data and runs live, and where the shipped head is."""

from __future__ import annotations

from pathlib import Path


def default_teacher_dir() -> Path:
    """The teacher data of ``draftpair demo train`` (its default workdir)."""
    from app.resources import user_data_dir

    return user_data_dir() / "demo-train"


def default_mtp_workdir() -> Path:
    from app.resources import user_data_dir

    return user_data_dir() / "demo-mtp-train"


def shipped_head_path() -> Path:
    from app.resources import resource_path

    return resource_path("demo-mtp")


def shipped_head_available() -> bool:
    p = shipped_head_path()
    return (p / "config.json").exists() and (p / "model.safetensors").exists()
