"""What a kind's engine hooks get: the loaded target, the request and the kind's own assets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.engine.events import GenerationRequest
    from app.engine.models import LoadedModel
    from app.engine.suffix_memory import SuffixMemory


@dataclass(frozen=True)
class DrafterContext:
    """Read-only: a plugin's ``unavailable`` and ``make`` read it; only the Session loads
    and holds ``asset`` (this kind's weights: a draft model, a head, a drafter network)."""

    target: LoadedModel
    request: GenerationRequest
    asset: Any = None
    replies: SuffixMemory | None = None  # the session's kept earlier replies, per scope
