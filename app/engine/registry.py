"""The one list of draft kinds: label, default width, needs, acceptance rule and factory.

The CLI, the GUI, the pairing check and the benchmark read the kinds from here. Every kind
but ``none`` names a module that provides::

    make(ctx: DrafterContext) -> Drafter
    unavailable(ctx: DrafterContext) -> str | None   # plain reason, None when it can run
    load(path, target) -> Any                        # kinds with their own folder (optional)

A module that is not installed makes its kind unavailable with a plain sentence.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.engine.drafters.base import Drafter
    from app.engine.events import GenerationRequest, SamplingParams
    from app.engine.models import LoadedModel


from app.kinds import KINDS, LABELS, SPECS, KindSpec  # noqa: F401 - re-exported

_BY_NAME = {s.name: s for s in SPECS}


def spec(name: str) -> KindSpec:
    try:
        return _BY_NAME[name]
    except KeyError:
        from app.errors import DraftPairError

        raise DraftPairError(
            f"Unknown draft kind {name!r}; choose one of {', '.join(KINDS)}."
        ) from None


def rule_for(name: str, sampling: SamplingParams) -> str:
    """The acceptance rule this kind uses under these sampling settings."""
    from app.engine.events import RULE_NONE
    from app.engine.verify import choose_rule

    if name == "none":
        return RULE_NONE
    return choose_rule(sampling, stochastic_draft=spec(name).stochastic)


@dataclass
class DrafterContext:
    """What a drafter factory gets."""

    target: LoadedModel
    draft: LoadedModel | None
    request: GenerationRequest
    assets: dict[str, Any] = field(default_factory=dict)  # per-kind weights kept per target


def module(name: str) -> ModuleType | None:
    """The kind's module, or None if this version does not have it."""
    s = spec(name)
    if s.module is None:
        return None
    try:
        return importlib.import_module(s.module)
    except ModuleNotFoundError as exc:
        if exc.name and s.module.startswith(exc.name):
            return None
        raise


def not_supported(name: str) -> str:
    return f"drafting with {spec(name).label} is not supported by this version of DraftPair yet"


def unavailable(name: str, ctx: DrafterContext | None) -> str | None:
    """Why this kind cannot run with what is loaded (None if it can)."""
    s = spec(name)
    if ctx is None or ctx.target is None:
        return "no target model is loaded"
    if s.module is None:
        return None
    mod = module(name)
    if mod is None:
        return not_supported(name)
    check = getattr(mod, "unavailable", None)
    return check(ctx) if check is not None else None


def make(name: str, ctx: DrafterContext) -> Drafter | None:
    """A fresh drafter for one request (None for ``none``)."""
    if spec(name).module is None:
        return None
    mod = module(name)
    if mod is None:
        from app.errors import DraftPairError

        raise DraftPairError(not_supported(name) + ".")
    return mod.make(ctx)
