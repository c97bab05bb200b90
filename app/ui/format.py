"""Plain-language formatting of engine results for the views (no Qt)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from app import kinds
from app.units import format_bytes, format_params  # noqa: F401 - re-exported for the views


class _KindLabels(Mapping[str, str]):
    """Draft kind -> UI label, read from the kind registry each time (kinds registered at run
    time included)."""

    def __getitem__(self, kind: str) -> str:
        plugin = kinds.find(kind)
        if plugin is None:
            raise KeyError(kind)
        return plugin.label

    def __iter__(self) -> Iterator[str]:
        return iter(kinds.names())

    def __len__(self) -> int:
        return len(kinds.names())


KIND_LABELS: Mapping[str, str] = _KindLabels()

FINISH_LABELS = {
    "stop": "end of reply",
    "length": "max tokens reached",
    "cancelled": "stopped by you",
    "error": "error",
}




def reply_stats(done: Any, requested_kind: str) -> dict[str, Any]:
    """Numbers + one display line for a finished reply (stored with the message)."""
    t = done.timings
    stats: dict[str, Any] = {
        "tok_s": round(t.predicted_per_second, 2),
        "ttft_ms": round(t.ttft_ms, 1),
        "prompt_n": t.prompt_n,
        "cache_n": getattr(t, "cache_n", 0),
        "tokens": t.predicted_n,
        "draft_n": t.draft_n,
        "draft_n_accepted": t.draft_n_accepted,
        "accept_len_mean": round(t.accept_len_mean, 3),
        "draft_kind": t.draft_kind,
        "requested_kind": requested_kind,
        "finish_reason": done.finish_reason,
        "fallback": t.fallback,
        "acceptance_rule": t.acceptance_rule,
        "exact": t.exact,
        "error": done.error,
        # accepted tokens that prompt lookup copied from the context beside the drafter
        "copy_accepted": copied_accepted(done),
    }
    stats["line"] = stats_line(stats)
    return stats


def copied_accepted(done: Any) -> int:
    """Accepted draft tokens of a reply that were prompt lookup's copies of the context
    (0 from an endpoint that does not report them)."""
    return int(getattr(done.timings, "copy_n_accepted", 0) or 0)


def stats_line(s: dict[str, Any]) -> str:
    ttft = f"TTFT {s.get('ttft_ms', 0):.0f} ms"
    if s.get("cache_n"):  # what the time to first token covered: prompt read vs reused
        ttft += f" ({s.get('prompt_n', 0):,} prompt tokens read, {s['cache_n']:,} reused)"
    parts = [f"{s.get('tok_s', 0):.1f} tok/s", ttft]
    kind = s.get("draft_kind", kinds.OFF)
    if not kinds.is_off(kind):
        n, a = s.get("draft_n", 0), s.get("draft_n_accepted", 0)
        pct = f" ({100 * a / n:.0f}%)" if n else ""
        parts.append(f"accepted {a}/{n}{pct}")
        if s.get("copy_accepted"):
            parts.append(f"{s['copy_accepted']} of them copied from the context")
        parts.append(f"mean accepted {s.get('accept_len_mean', 0):.2f}/round")
    parts.append(KIND_LABELS.get(kind, kind) if not kinds.is_off(kind) else "no speculation")
    parts.append(FINISH_LABELS.get(s.get("finish_reason", ""), s.get("finish_reason", "")))
    if s.get("exact") is False:
        parts.append("lossy mode")
    return " · ".join(parts)


def fallback_line(s: dict[str, Any]) -> str | None:
    """Why speculation did not run although it was asked for (None when it ran or was off)."""
    requested = s.get("requested_kind", kinds.OFF)
    if kinds.is_off(requested):
        return None
    if s.get("fallback"):
        return f"Speculation did not run: {s['fallback']}."
    if kinds.is_off(s.get("draft_kind", "")) and s.get("finish_reason") != "error":
        return f"Speculation ({KIND_LABELS.get(requested, requested)}) did not run."
    return None
