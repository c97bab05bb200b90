"""What a benchmark run records: its conditions, one record per request, the whole report.

Plain data shared by the runner (which fills it) and the summary and reports (which read it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

OFF = "off"
PEER_PLAIN = "mlx-lm plain"
PEER_SPEC = "mlx-lm speculative"


@dataclass(frozen=True)
class Condition:
    name: str  # "off", a draft kind, a peer row or "remote HOST:PORT"
    engine: str  # "draftpair" | "mlx-lm" | "remote"
    draft_kind: str  # "none" | "prompt-lookup" | "full-model" | "remote"
    width: int
    url: str = ""  # a remote endpoint's address
    lookup_assist: bool = True  # model drafters: prompt lookup copies the context beside them
    trees: str = "off"  # trees of candidates from the drafter: "off" | "on" | "flat"


@dataclass(frozen=True)
class RunRecord:
    task_id: str
    task_kind: str
    condition: str
    engine: str
    draft_kind: str
    width: int
    temperature: float
    repeat: int
    seed: int
    finish_reason: str
    output_n: int
    tokens: tuple[int, ...]
    text: str
    timings: dict[str, Any]
    contention: dict[str, Any]
    superseded: bool = False  # flagged for contention and replaced by a re-run
    attempt: int = 0
    error: str | None = None
    rounds_n: int = 0
    round_profile: dict[str, Any] = field(default_factory=dict)

    @property
    def decode_tps(self) -> float:
        return float(self.timings.get("predicted_per_second") or 0.0)

    @property
    def flagged(self) -> bool:
        return bool(self.contention.get("flagged"))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens"] = list(self.tokens)
        return d


@dataclass
class BenchReport:
    config: dict[str, Any]
    environment: dict[str, Any]
    tasks: list[dict[str, Any]]
    conditions: list[Condition]
    runs: list[RunRecord]
    skipped: dict[str, str]  # draft kind -> why it was not benchmarked
    started_at: str
    duration_s: float = 0.0
    cancelled: bool = False
    reruns: int = 0
    persistent_contention: bool = False  # re-runs stopped: the machine never went quiet
    contention_timeline: list[dict[str, float]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def measured(self) -> list[RunRecord]:
        """Runs that count (not superseded by a re-run, no error)."""
        return [r for r in self.runs if not r.superseded and r.error is None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": 1,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 2),
            "cancelled": self.cancelled,
            "reruns": self.reruns,
            "persistent_contention": self.persistent_contention,
            "config": self.config,
            "environment": self.environment,
            "tasks": self.tasks,
            "conditions": [asdict(c) for c in self.conditions],
            "skipped": self.skipped,
            "summary": self.summary,
            "runs": [r.to_dict() for r in self.runs],
            "contention_timeline": self.contention_timeline,
        }
