"""The draft kinds DraftPair knows: names, labels, default widths and what each needs.

Plain data with no MLX import, so every layer (pairing check, CLI, GUI, bench) reads the one
list; ``app.engine.registry`` adds the factories and the acceptance rules.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KindSpec:
    name: str  # "none" | "prompt-lookup" | "full-model" | "mtp" | "dflash"
    label: str  # UI label
    default_width: int  # proposals per round when the request does not say
    needs_draft_model: bool  # a separate folder (full-model, dflash)
    needs_taps: bool  # reads the target's hidden states (mtp, dflash)
    stochastic: bool  # samples its proposals at T > 0 (verified by rejection sampling)
    module: str | None  # engine module that provides make / unavailable (/ load)


SPECS: tuple[KindSpec, ...] = (
    KindSpec("none", "Off", 0, False, False, False, None),
    KindSpec("prompt-lookup", "Prompt lookup", 7, False, False, False,
             "app.engine.drafters.prompt_lookup"),
    KindSpec("full-model", "Draft model", 4, True, False, True,
             "app.engine.drafters.full_model"),
    KindSpec("mtp", "Built-in predictor (MTP)", 4, False, True, True, "app.engine.drafters.mtp"),
    KindSpec("dflash", "Block drafter (DFlash)", 16, True, True, True,
             "app.engine.drafters.dflash"),
)  # fmt: skip
KINDS: tuple[str, ...] = tuple(s.name for s in SPECS)
LABELS: dict[str, str] = {s.name: s.label for s in SPECS}
