"""What the pairing check reports: findings with a severity, the verdict, the draft kinds."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app import kinds
from app.checkpoints.memory_estimate import MemoryEstimate

BLOCKER, WARNING, NOTE = "blocker", "warning", "note"
VERDICT_WORKS = "works"
VERDICT_WARNINGS = "works-with-warnings"
VERDICT_FAILS = "will-not-work"
VERDICT_LABELS = {
    VERDICT_WORKS: "Works",
    VERDICT_WARNINGS: "Works, with warnings",
    VERDICT_FAILS: "Will not work",
}
DEFAULT_CONTEXT = 4096


def normalize_kind(kind: str | None) -> str | None:
    if kind is None:
        return None
    try:
        return kinds.normalize(kind)
    except kinds.UnknownKind:
        raise ValueError(f"unknown draft kind {kind!r} (choose from {', '.join(kinds.names())})"
                         ) from None


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str  # blocker | warning | note
    message: str  # one plain sentence for a non-programmer
    detail: str = ""  # the technical facts

    def to_dict(self) -> dict:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class PairingReport:
    target: str
    draft: str | None
    kind: str
    context: int
    verdict: str
    findings: tuple[Finding, ...]
    memory: MemoryEstimate | None = None
    elapsed_ms: float = 0.0

    @property
    def works(self) -> bool:
        return self.verdict != VERDICT_FAILS

    def by_severity(self, severity: str) -> list[Finding]:
        return [f for f in self.findings if f.severity == severity]

    @property
    def blockers(self) -> list[Finding]:
        return self.by_severity(BLOCKER)

    @property
    def warnings(self) -> list[Finding]:
        return self.by_severity(WARNING)

    def codes(self) -> set[str]:
        return {f.code for f in self.findings}

    def summary(self) -> str:
        """One plain sentence: the verdict and its main reason."""
        label = VERDICT_LABELS[self.verdict]
        main = self.blockers or self.warnings
        return f"{label}: {main[0].message}" if main else f"{label}."

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "draft": self.draft,
            "kind": self.kind,
            "context": self.context,
            "verdict": self.verdict,
            "findings": [f.to_dict() for f in self.findings],
            "memory": self.memory.to_dict() if self.memory else None,
            "elapsed_ms": round(self.elapsed_ms, 1),
        }

    def format_text(self, *, details: bool = True) -> str:
        lines = [f"Target: {self.target}"]
        if self.draft:
            lines.append(f"Draft:  {self.draft}")
        lines.append(f"Kind:   {self.kind}   context {self.context} tokens")
        lines.append(f"Verdict: {VERDICT_LABELS[self.verdict]}")
        marks = {BLOCKER: "x", WARNING: "!", NOTE: "-"}
        for sev in (BLOCKER, WARNING, NOTE):
            for f in self.by_severity(sev):
                lines.append(f"  [{marks[sev]}] {sev}: {f.message}")
                if details and f.detail and not f.code.startswith("memory."):
                    lines.append(f"        {f.code}: {f.detail}")
        if self.memory:
            lines.append("Memory: " + "; ".join(self.memory.lines()))
        return "\n".join(lines)


class FindingList:
    def __init__(self) -> None:
        self.items: list[Finding] = []

    def add(self, code: str, severity: str, message: str, detail: str = "") -> None:
        self.items.append(Finding(code, severity, message, detail))

    def has_blocker(self, prefix: str = "") -> bool:
        return any(f.severity == BLOCKER and f.code.startswith(prefix) for f in self.items)


def verdict_of(findings: Iterable[Finding]) -> str:
    sev = {f.severity for f in findings}
    return (
        VERDICT_FAILS if BLOCKER in sev else VERDICT_WARNINGS if WARNING in sev else VERDICT_WORKS
    )
