"""What one request's round loop counted, and the ``Timings`` made from it.

The loop reports each target pass (``passed``), each round (``round``: a ``RoundRecord``) and
the host time of drafting, verifying and rolling back; ``timings`` turns them into the
llama-server-named figures every consumer reads. ``prompt_n`` (read) and ``cache_n`` (reused
from a kept conversation) are always filled, whatever the draft kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx

from app.engine.events import RULE_NONE, RoundRecord, Timings
from app.kinds import OFF


@dataclass
class StepTimes:
    """Host milliseconds of one round's parts."""

    draft: float = 0.0
    verify: float = 0.0
    rollback: float = 0.0


@dataclass
class LoopStats:
    kind: str = OFF
    width: int = 0
    rule: str = RULE_NONE
    fallback: str | None = None
    reused: int = 0  # prompt tokens a kept conversation already held
    read: int = 0  # prompt tokens read by this request
    rounds: list[RoundRecord] = field(default_factory=list)
    draft_n: int = 0
    draft_acc: int = 0
    verify_passes: int = 0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    rollback_ms: float = 0.0
    eos_emitted: bool = False  # the end-of-text token was produced by a pass too
    members: tuple[str, ...] = ()  # sources that take turns (auto): counted per source

    def passed(self, times: StepTimes | None = None) -> None:
        """One target pass (a plain step or a round's verify)."""
        self.verify_passes += 1
        if times is not None:
            self.draft_ms += times.draft
            self.verify_ms += times.verify
            self.rollback_ms += times.rollback

    def round(self, *, proposed: int, accepted: int, emitted: int, width: int, copied: bool,
              times: StepTimes, extra_draft_ms: float, t_ms: float,
              total_tokens: int, source: str = "", tree_nodes: int = 0) -> RoundRecord:
        self.draft_n += proposed
        self.draft_acc += accepted
        rec = RoundRecord(
            index=len(self.rounds),
            proposed=proposed,
            accepted=accepted,
            bonus=emitted > accepted,
            emitted=emitted,
            width=width,
            copied=copied,
            draft_ms=times.draft + extra_draft_ms,
            verify_ms=times.verify,
            rollback_ms=times.rollback,
            t_ms=t_ms,
            total_tokens=total_tokens,
            source=source,
            tree_nodes=tree_nodes,
        )
        self.rounds.append(rec)
        return rec

    def timings(self, *, n_out: int, prompt_ms: float, predicted_ms: float,
                ttft_ms: float) -> Timings:
        n_rounds = len(self.rounds)
        return Timings(
            prompt_n=self.read,
            cache_n=self.reused,
            prompt_ms=prompt_ms,
            prompt_per_second=self.read / (prompt_ms / 1e3) if prompt_ms > 0 else 0.0,
            predicted_n=n_out,
            predicted_ms=predicted_ms,
            predicted_per_second=n_out / (predicted_ms / 1e3) if predicted_ms > 0 else 0.0,
            draft_n=self.draft_n,
            draft_n_accepted=self.draft_acc,
            draft_rounds=n_rounds,
            copy_n=sum(r.proposed for r in self.rounds if r.copied),
            copy_n_accepted=sum(r.accepted for r in self.rounds if r.copied),
            copy_rounds=sum(r.copied for r in self.rounds),
            tree_rounds=len(trees := [r for r in self.rounds if r.tree_nodes]),
            tree_depth_mean=sum(r.accepted for r in trees) / len(trees) if trees else 0.0,
            draft_kind=self.kind,
            accept_len_mean=self.draft_acc / n_rounds if n_rounds else 0.0,
            acceptance_rate=self.draft_acc / self.draft_n if self.draft_n else 0.0,
            tokens_per_verify=(n_out + self.eos_emitted) / self.verify_passes
            if self.verify_passes else 0.0,
            verify_passes=self.verify_passes,
            draft_ms=self.draft_ms,
            verify_ms=self.verify_ms,
            rollback_ms=self.rollback_ms,
            ttft_ms=ttft_ms,
            peak_memory_bytes=int(mx.get_peak_memory()),
            draft_width=self.width,
            acceptance_rule=self.rule,
            fallback=self.fallback,
            sources=self.per_source(),
        )

    def per_source(self) -> dict[str, dict[str, int]]:
        """Rounds, drafted and accepted tokens and rounds verified as trees of each source,
        and the plain steps (only when several sources take turns)."""
        if not self.members:
            return {}
        out = {name: {"rounds": 0, "drafted": 0, "accepted": 0, "trees": 0}
               for name in self.members}
        for r in self.rounds:
            row = out.setdefault(r.source, {"rounds": 0, "drafted": 0, "accepted": 0,
                                            "trees": 0})
            row["rounds"] += 1
            row["drafted"] += r.proposed
            row["accepted"] += r.accepted
            row["trees"] += bool(r.tree_nodes)
        out["plain"] = {"rounds": self.verify_passes - len(self.rounds)}
        return out
