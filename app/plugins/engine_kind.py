"""The base of the draft kinds whose drafter is one engine module (``engine_module()``) with
the entry points ``unavailable(ctx)``, ``load(folder, target)`` and ``make(ctx)``: the heavy
calls go to that module, imported the first time one is made."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.kinds import KindPlugin

if TYPE_CHECKING:
    from app.engine.drafter_context import DrafterContext
    from app.engine.drafters.base import Drafter
    from app.engine.models import LoadedModel


class EngineModuleKind(KindPlugin):
    def _engine(self) -> Any:
        name = self.engine_module()
        assert name is not None, f"{self!r} names no engine module"
        return importlib.import_module(name)

    def unavailable(self, ctx: DrafterContext) -> str | None:
        why: str | None = self._engine().unavailable(ctx)
        return why

    def load_folder(self, folder: Path, target: LoadedModel, *, precision: str) -> Any:
        return self._engine().load(folder, target)

    def make(self, ctx: DrafterContext) -> Drafter:
        drafter: Drafter = self._engine().make(ctx)
        return drafter
