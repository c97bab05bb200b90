"""The drafter interface: what every draft kind provides to the round loop.

A drafter proposes ``k`` tokens after the committed sequence; the target verifies them in one
pass. Drafters that sample (``stochastic``) also return the distributions ``q`` they sampled
from so the rejection rule stays exact. Drafters that need the target's hidden states from the
verify pass (MTP heads, DFlash) set ``needs_hidden`` and receive them in ``observe``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import mlx.core as mx

from app.engine.events import SamplingParams


@dataclass
class Proposal:
    tokens: mx.array  # (k,) uint32; may still be lazy
    q: mx.array | None = None  # (k, V_target) probabilities, stochastic drafters only
    draft_ms: float = 0.0  # host time spent building the proposal

    @property
    def k(self) -> int:
        return int(self.tokens.shape[0])


class Drafter(abc.ABC):
    kind: str = "?"
    stochastic: bool = False
    needs_hidden: bool = False
    default_width: int = 4

    @abc.abstractmethod
    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        """Fresh per-request state. Returns lazy arrays to evaluate with the target prefill."""

    @abc.abstractmethod
    def propose(self, committed: list[int], k: int) -> Proposal | None:
        """Up to ``k`` proposals after ``committed`` (prompt + output), or None to skip."""

    @abc.abstractmethod
    def observe(
        self,
        committed: list[int],
        proposal: Proposal | None,
        accepted: int,
        new_tokens: list[int],
        hidden: Any = None,
    ) -> None:
        """Called after every step with the tokens just committed (accepted + target's own)."""

    def warmup(self, widths: list[int]) -> None:  # noqa: B027 - optional hook
        """Run each width once so that first-use costs are not timed."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release per-request state (caches)."""

    def stats(self) -> dict[str, Any]:
        return {}
