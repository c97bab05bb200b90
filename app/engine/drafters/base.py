"""The drafter interface: what every draft kind provides to the round loop.

A drafter proposes up to ``k`` tokens after the committed sequence; the target verifies them
in one pass. Drafters that sample (``stochastic``) also return the distributions ``q`` they
sampled from so the rejection rule stays exact. Drafters that read the target's hidden states
(MTP heads, DFlash) set ``taps``; the loop then hands them the rows of every target pass.

Hidden-row invariant: across ``prefill`` chunks and ``observe`` calls a drafter receives
exactly one row per position the target cache holds, in order. ``committed`` is prompt +
output; the target has fed ``committed[:fed]`` where ``fed = len(committed) - 1`` after a
speculative round (the target's own correction/bonus token is still pending) and
``fed = len(committed)`` after a plain step. ``observe(hidden)`` carries exactly the rows that
pass fed and kept (pending + accepted proposals; rejected rows dropped). The row for position
``i`` is the state whose LM head output predicts token ``i + 1``. Drafters rewind their own
caches with ``app.engine.rollback.rewind_cache(cache, length)``.
"""

from __future__ import annotations

import abc
from typing import Any

import mlx.core as mx

from app.engine.events import SamplingParams
from app.engine.prompt_cache import CachedState
from app.engine.proposal import Proposal as Proposal  # drafters import it from here
from app.engine.taps import Hidden, TapRequest


class Drafter(abc.ABC):
    kind: str = "?"
    stochastic: bool = False  # samples proposals -> Proposal.q, rejection sampling
    keep_dist: bool = False  # set when trees grow from its chains: fill ``Proposal.dist``
    # its per-node distributions do not depend on the nodes before (one block pass): a tree
    # may branch anywhere, not only beside its chain
    marginals: bool = False
    # set when the request lets rounds be trees: a drafter with several candidates of its own
    # (suffix decoding's continuations) may propose them as a tree (``Proposal.reach``)
    tree_candidates: bool = False
    taps: TapRequest | None = None  # hidden states it reads (None: none)
    block: bool = False  # True: k proposals cost one drafter pass (DFlash)
    adaptive_width: bool = True  # the loop's width policy sizes the rounds (app.engine.width)
    stops_early: bool = False  # may return fewer than k by itself (asked for the full width)
    # feeds the committed tokens it did not propose at its next proposal, in one longer first
    # pass (steps it sits out cost it nothing until then): a combining kind prices that pass
    catches_up: bool = False
    # a one-token proposal changes nothing but feeding the rows its next proposal would feed
    # anyway, and costs one drafting step: a combining kind may ask it beside another source's
    # round and score it against the committed token (while it is not ``stochastic``)
    peeks: bool = False
    # one drafting step (sequential) or one drafter pass (block), in target plain steps;
    # the session measures it at warm-up (``draft_step_ms`` / a target step)
    step_cost: float = 0.0
    draft_step_ms: float | None = None

    @abc.abstractmethod
    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        """Fresh per-request state. Returns lazy arrays to evaluate with the target prefill."""

    def prefill(self, tokens: list[int], hidden: Hidden | None) -> None:  # noqa: B027
        """One prefill chunk of the target: its tokens and (with ``taps``) their rows."""

    @abc.abstractmethod
    def propose(self, committed: list[int], k: int) -> Proposal | None:
        """Up to ``k`` proposals after ``committed`` (prompt + output), or None to skip.
        May return fewer than ``k`` (e.g. a confidence stop)."""

    @abc.abstractmethod
    def observe(
        self,
        committed: list[int],
        proposal: Proposal | None,
        accepted: int,
        new_tokens: list[int],
        hidden: Hidden | None = None,
    ) -> None:
        """Called after every step with the tokens just committed (accepted + target's own)."""

    def cost(self, k: int) -> float:
        """Drafting cost of ``k`` proposals, in target plain steps."""
        if k <= 0:
            return 0.0
        return self.step_cost if self.block else k * self.step_cost

    def warmup(self, widths: list[int]) -> None:  # noqa: B027 - optional hook
        """Run each width once and time one drafting step (``draft_step_ms``)."""

    def set_verify_costs(self, costs: dict[int, float]) -> None:  # noqa: B027 - optional hook
        """The target's pass over ``n`` tokens in plain steps (``n -> cost``), from this
        machine's calibration at the request's context, for drafters that size rounds."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release per-request state (caches)."""

    def stats(self) -> dict[str, Any]:
        return {}

    # -- kept conversations (app.engine.reuse) -------------------------------------------
    # A drafter with its own model state (a draft model's cache) sets ``keeps_state``: the
    # lease keeps ``kept_state()`` between turns and hands it back through ``resume``. A
    # drafter that reads the target's hidden states (``taps``) rebuilds its state from the
    # rows the lease keeps for every position the target's kept cache holds
    # (``resume_rows``), so it follows a conversation whatever kind the earlier turns used.
    keeps_state: bool = False

    def state_key(self, width: int) -> str:
        """What a kept state must have been made by to be resumed here."""
        return f"{self.kind}:{width}"

    def kept_state(self) -> CachedState | None:
        """After the prompt is read: the drafter's own cache and the tokens it holds."""
        return None

    def resume(self, state: CachedState) -> None:
        """Before ``begin``: continue from a kept state (it holds a prefix of the prompt)."""
        raise NotImplementedError(f"the {self.kind} drafter keeps no state of its own")

    def resume_rows(self, rows: Hidden) -> None:
        """Before ``begin``: the target's rows of the first ``rows.n`` positions, which the
        target's cache already holds (a kept conversation); the prefill then brings the rest."""
        raise NotImplementedError(f"the {self.kind} drafter reads no hidden states")
