"""Plain-language formatting of engine results for the views (no Qt)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from app import kinds
from app.kinds.shares import shares_line
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


def kind_tooltip(kind: str) -> str:
    """The kind's one-line explanation (its plugin's), then the technical name the CLI and
    reports use."""
    plugin = kinds.find(kind)
    explain = plugin.explanation if plugin is not None else ""
    return f"{explain}\n(technical name: {kind})" if explain else kind

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
        "warmup_ms": round(getattr(t, "warmup_ms", 0.0) or 0.0, 1),  # of ttft_ms, first use only
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
        # auto speculation: per source rounds / drafted / accepted, and the plain steps
        "sources": dict(getattr(t, "sources", None) or {}),
        # rounds verified as trees of candidates, and how deep their accepted paths went
        "tree_rounds": int(getattr(t, "tree_rounds", 0) or 0),
        "tree_depth_mean": round(float(getattr(t, "tree_depth_mean", 0.0) or 0.0), 2),
    }
    stats["line"] = stats_line(stats)
    return stats


def copied_accepted(done: Any) -> int:
    """Accepted draft tokens of a reply that were prompt lookup's copies of the context
    (0 from an endpoint that does not report them)."""
    return int(getattr(done.timings, "copy_n_accepted", 0) or 0)


def stats_line(s: dict[str, Any]) -> str:
    """One line under a reply. A reply without a token (failed, or stopped before its first
    token) says only how it ended: no rate, no time to first token, no zero counts."""
    reason = s.get("finish_reason", "")
    if reason == "error":
        return ""  # the error itself is shown instead
    finish = FINISH_LABELS.get(reason, reason)
    if not s.get("tokens"):
        return finish + (" before the first token" if reason == "cancelled" else "")
    # what the time to first token covered: prompt tokens read, and reused from the kept chat
    warmup = s.get("warmup_ms") or 0
    first = f"{duration(warmup)} first-time warm-up, " if warmup >= 1 else ""
    ttft = (f"TTFT {duration(s.get('ttft_ms', 0))} ({first}{s.get('prompt_n', 0):,} prompt tokens "
            f"read, {s.get('cache_n', 0):,} reused)")
    parts = [f"{s.get('tok_s', 0):.1f} tok/s", ttft]
    kind = s.get("draft_kind", kinds.OFF)
    if not kinds.is_off(kind):
        n, a = s.get("draft_n", 0), s.get("draft_n_accepted", 0)
        pct = f" ({100 * a / n:.0f}%)" if n else ""
        parts.append(f"accepted {a}/{n}{pct}")
        if s.get("copy_accepted"):
            parts.append(f"{s['copy_accepted']} of them copied from the context")
        parts.append(f"mean accepted {s.get('accept_len_mean', 0):.2f}/round")
        if s.get("tree_rounds"):
            parts.append(f"{s['tree_rounds']} rounds as trees, accepted path "
                         f"{s.get('tree_depth_mean', 0):.2f} deep")
    parts.append(KIND_LABELS.get(kind, kind) if not kinds.is_off(kind) else "no speculation")
    if s.get("sources"):
        parts[-1] += f" ({shares_line(s['sources'])})"
    parts.append(finish)
    if s.get("exact") is False:
        parts.append("lossy mode")
    return " · ".join(parts)


def duration(ms: float) -> str:
    """``850 ms`` below a second, ``2.4 s`` above."""
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


STAGE_WORDS = {
    "waiting": "Waiting for the engine",
    "prefill": "Reading the prompt",
    "decoding": "Writing the reply",
}


def status_words(stage: str, message: str, kind: str = kinds.OFF) -> str:
    """A stage of a running reply in plain words, for the chat's status line.

    Warm-up messages carry technical detail ("verify widths 1..17"): only a progress figure
    ("3/17", "3 of 17", "40%") is kept from them."""
    if stage == "warmup":
        label = KIND_LABELS.get(kind, kind) if not kinds.is_off(kind) else "speculation"
        text = f"Measuring this computer's speed for {label} (only the first time)"
        progress = warmup_progress(message)
        return text + (f": {progress}" if progress else "") + "…"
    words = STAGE_WORDS.get(stage, stage[:1].upper() + stage[1:])
    return words + (f" ({message})" if message and stage == "prefill" else "") + "…"


def warmup_progress(message: str) -> str:
    """``step 3 of 17`` or ``40%`` from a warm-up message, or "" when it has no progress figure."""
    import re

    m = re.search(r"(\d+)\s*(?:/|of)\s*(\d+)", message or "")
    if m:
        return f"step {int(m.group(1))} of {int(m.group(2))}"
    pct = re.search(r"(\d+(?:\.\d+)?)\s*%", message or "")
    return f"{float(pct.group(1)):.0f}%" if pct else ""


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
