"""What a draft kind is: one ``KindPlugin`` object owns everything kind-specific.

The light half (names, words, folder recognition, pairing findings, memory) reads checkpoint
files only and imports no MLX, so the pairing check, the CLI's argument parser and the GUI's
pickers can ask it. The heavy half (whether it can run with what is loaded, loading its
weights, making a drafter) imports engine code inside the methods, when the engine calls them.

A subclass overrides what differs from these defaults; ``app.kinds.registry`` lists them.
Types in the signatures are imported for checkers only: this module sits in the lowest layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.checkpoints.inspect import CheckpointInfo
    from app.checkpoints.pairing.report import FindingList
    from app.engine.drafter_context import DrafterContext
    from app.engine.drafters.base import Drafter
    from app.engine.models import LoadedModel


class KindRefused(Exception):
    """A kind asked for something it does not do (``plain_message``: one plain sentence)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.plain_message = message


class KindPlugin:
    """One draft kind. Class attributes describe it; methods answer for it."""

    # -- words and facts ----------------------------------------------------------------
    name: str = ""  # technical name: CLI choices, API field, settings, timings
    label: str = ""  # plain UI label
    explanation: str = ""  # one plain line for pickers and --help
    technical: str = ""  # the technical name, for tooltips and messages
    default_width: int = 4  # proposals per round when the request does not say
    proposes: bool = True  # False only for the kind that turns speculation off
    default_choice: bool = False  # the one the app starts with (needs nothing, suits all)
    combines: bool = False  # runs the other kinds' drafters itself, one per round (auto)
    share_word: str = ""  # its short name in auto's shares ("MTP head 58% of rounds")
    needs_draft_folder: bool = False  # runs a separate checkpoint folder (the "draft")
    folder_fallback: bool = False  # takes any draft folder no other kind recognises
    needs_taps: bool = False  # reads the target's hidden states from the verify pass
    stochastic: bool = False  # samples proposals at T > 0 (verified by rejection sampling)
    demo_draft: str | None = None  # built-in draft folder used with the demo target
    draft_is_lm: bool = False  # the draft folder is a causal LM mlx-lm loads (cache rewinds)
    mlx_lm_peer: bool = False  # mlx-lm's own speculative decoding runs it (bench peer)
    scratch_width: int = 8  # verify width the memory estimate assumes when none is given
    suggest_bonus: float = 0.0  # preference when ranking the draft folders that pair
    aliases: tuple[str, ...] = ()  # other spellings the pairing check accepts
    keeps_replies: bool = False  # proposes from earlier replies kept per scope (chat, API key)
    grows_trees: bool = False  # its proposals carry a distribution that trees grow from
    shapes_trees: bool = False  # its drafter shapes trees itself where a request allows them
    # the bench's goals for it: (name suffix, what, baseline "off" | "peer", task kinds or
    # None for all, speed-up to reach)
    bench_goals: tuple[tuple[str, str, str, tuple[str, ...] | None, float], ...] = ()

    def __repr__(self) -> str:
        return f"<draft kind {self.name}>"

    # -- light: checkpoint files only ----------------------------------------------------
    def recognises(self, config: dict[str, Any]) -> bool:
        """Whether a draft folder with this ``config.json`` is this kind's (folder kinds)."""
        return self.folder_fallback

    def engine_module(self) -> str | None:
        """The engine module the kind needs, looked up (never imported) by the pairing
        check to say when this build of DraftPair lacks it."""
        return None

    def target_findings(self, t: CheckpointInfo, out: FindingList) -> None:
        """Findings about the target for this kind (before any draft folder's)."""

    def draft_findings(self, t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
        """Findings about the draft folder against the target."""

    def draft_kv_bytes(self, t: CheckpointInfo, d: CheckpointInfo | None,
                       context: int) -> int | None:
        """The drafter's own cache at ``context`` tokens, or None for the estimate's usual
        one (a draft folder's K/V like any model's, nothing without a folder)."""
        return None

    def folder_reason(self, ratio: float | None) -> str:
        """One plain sentence on why a draft folder of this kind is suggested."""
        if ratio is not None:
            return f"Same tokens as the target, {ratio:.1%} of its size."
        return "Same tokens as the target."

    def offer(self, t: CheckpointInfo) -> str | None:
        """For kinds with no draft folder: the plain reason it is worth offering for this
        target, else None."""
        return None

    # -- heavy: engine code, imported when called ----------------------------------------
    def unavailable(self, ctx: DrafterContext) -> str | None:
        """Why it cannot run with what is loaded (None when it can). A pure query: reads
        what the session holds, loads and stores nothing."""
        return None

    def load_folder(self, folder: Path, target: LoadedModel, *, precision: str) -> Any:
        """Load a draft folder of this kind for ``target``; the Session holds the result."""
        raise KindRefused(f"{self.label} takes no draft folder.")

    def load_assets(self, ctx: DrafterContext) -> Any:
        """Weights the kind needs when no draft folder supplied them (a head in the target's
        files, a built-in drafter), or None if it needs none; the Session holds them."""
        return None

    def make(self, ctx: DrafterContext) -> Drafter:
        """A fresh drafter for one request."""
        raise KindRefused(f"{self.label} has no drafter.")
