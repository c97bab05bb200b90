"""Typed, schema-versioned app settings stored as JSON under platformdirs (atomic writes).

Window geometry is not here (QSettings keeps it in ``window.ini`` next to this file). Unknown keys are dropped, bad values fall
back to their defaults one by one, and older schema versions are migrated step by step
(napari ``settings/_migrations.py``), so a damaged file never stops the app from starting.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from app import kinds
from app.fileio import atomic_write_json

SCHEMA_VERSION = 2


@dataclass
class Preset:
    name: str
    temperature: float
    top_p: float
    max_tokens: int


DEFAULT_PRESETS = (
    Preset("Precise", 0.0, 1.0, 256),
    Preset("Balanced", 0.7, 0.9, 512),
    Preset("Creative", 1.0, 0.95, 768),
)


@dataclass
class Settings:
    schema_version: int = SCHEMA_VERSION
    theme: str = "system"  # system | light | dark
    target: str = "demo"
    draft: str = "demo-draft"
    system_prompt: str = "You are a helpful assistant."
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    draft_kind: str = field(default_factory=kinds.default_choice)
    draft_width: int = 0  # 0 = the kind's default
    highlight_drafts: bool = True
    show_panels: bool = True
    compare_runs: int = 3
    compare_max_tokens: int = 96
    compare_kind: str = field(default_factory=kinds.default_choice)
    context_length: int = 4096
    context_policy: str = "refuse"  # chats over the model's context: refuse | drop-oldest
    send_key: str = "enter"  # enter: Enter sends, Shift+Enter new line | ctrl-enter
    presets: list[Preset] = field(default_factory=lambda: list(DEFAULT_PRESETS))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Settings:
        data = migrate(dict(data))
        out = cls()
        for f in fields(cls):
            if f.name not in data or f.name == "schema_version":
                continue
            value = data[f.name]
            default = getattr(out, f.name)
            if f.name == "presets":
                value = _presets(value)
                if value is None:
                    continue
            elif isinstance(default, bool):
                if not isinstance(value, bool):
                    continue
            elif isinstance(default, int) and not isinstance(default, bool):
                if not isinstance(value, int) or isinstance(value, bool):
                    continue
            elif isinstance(default, float):
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue
                value = float(value)
            elif isinstance(default, str) and not isinstance(value, str):
                continue
            setattr(out, f.name, value)
        out.clamp()
        return out

    def clamp(self) -> None:
        self.temperature = min(max(self.temperature, 0.0), 2.0)
        self.top_p = min(max(self.top_p, 0.05), 1.0)
        self.max_tokens = min(max(self.max_tokens, 1), 32768)
        self.draft_width = min(max(self.draft_width, 0), 64)
        self.compare_runs = min(max(self.compare_runs, 1), 20)
        self.compare_max_tokens = min(max(self.compare_max_tokens, 8), 4096)
        if self.theme not in ("system", "light", "dark"):
            self.theme = "system"
        if self.send_key not in ("enter", "ctrl-enter"):
            self.send_key = "enter"
        if self.context_policy not in ("refuse", "drop-oldest"):
            self.context_policy = "refuse"
        if self.draft_kind not in kinds.names():
            self.draft_kind = kinds.default_choice()
        if self.compare_kind not in [p.name for p in kinds.drafting()]:
            self.compare_kind = kinds.default_choice()


def _presets(value: Any) -> list[Preset] | None:
    if not isinstance(value, list):
        return None
    out = []
    for item in value:
        try:
            out.append(
                Preset(
                    str(item["name"]), float(item["temperature"]), float(item["top_p"]),
                    int(item["max_tokens"]),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out or None


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    # v1 called the speculation choice "speculation" and used "off" for none.
    spec = data.pop("speculation", None)
    if spec is not None and "draft_kind" not in data:
        data["draft_kind"] = kinds.OFF if spec == "off" else spec
    return data


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    version = data.get("schema_version", 1)
    if not isinstance(version, int):
        version = 1
    while version < SCHEMA_VERSION and version in MIGRATIONS:
        data = MIGRATIONS[version](data)
        version += 1
    data["schema_version"] = SCHEMA_VERSION
    return data


def default_settings_path() -> Path:
    override = os.environ.get("DRAFTPAIR_CONFIG_DIR")
    if override:
        return Path(override) / "settings.json"
    from platformdirs import user_config_path

    return user_config_path("DraftPair", appauthor=False) / "settings.json"


class SettingsStore:
    """Load once at start-up, ``save`` atomically (temp file, fsync, rename)."""

    def __init__(self, path: Path | None = None):
        self.path = path or default_settings_path()
        self.problem: str | None = None  # why the file was ignored, for a non-modal note

    def load(self) -> Settings:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return Settings()
        except (OSError, ValueError) as exc:
            from app.errors import user_message

            backup = self._set_aside()
            self.problem = (f"The settings file could not be read ({user_message(exc, file=self.path)}"
                            f"){backup}; DraftPair started with default settings.")
            return Settings()
        if not isinstance(data, dict):
            backup = self._set_aside()
            self.problem = (f"The settings file {self.path} is not a JSON object{backup}; "
                            "DraftPair started with default settings.")
            return Settings()
        return Settings.from_json(data)

    def _set_aside(self) -> str:
        """Keep a copy of a damaged settings file before the next save replaces it."""
        import shutil
        import time

        backup = self.path.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            shutil.copyfile(self.path, backup)
        except OSError:
            return ""
        return f"; a copy was kept as {backup}"

    def save(self, settings: Settings) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, settings.to_json())
