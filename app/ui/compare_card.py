"""The Compare result card as rich text (plain Python over a CompareSummary; no widgets)."""

from __future__ import annotations

import html

from app.ui.compare_model import CompareSummary
from app.ui.format import KIND_LABELS, format_bytes
from app.ui.theme import Colors


def card_html(s: CompareSummary, colors: Colors, *, partial: bool) -> str:
    c = colors
    color = c.ok if s.speedup_median >= 1.05 else (c.warn if s.speedup_median >= 0.95 else c.bad)
    verdict = (
        "faster" if s.speedup_median >= 1.05 else "about the same" if s.speedup_median >= 0.95
        else "slower"
    )
    spread = (
        f"range {s.speedup_min:.2f}–{s.speedup_max:.2f}× over {s.pairs} pairs"
        if s.pairs > 1 else "1 pair: run more pairs for a spread"
    )
    unit = "tokens" if s.compared_by == "tokens" else "characters"
    same = (
        f"<span style='color:{c.ok}'>✔ Identical outputs</span> ({s.compared_tokens} {unit})"
        if s.identical
        else f"<span style='color:{c.warn}'>✘ Outputs differ from "
        f"{unit[:-1]} {s.first_difference}</span> (of {s.compared_tokens})"
    )
    if s.extra_memory_bytes is None:
        mem = "not comparable (another process)"
    elif abs(s.extra_memory_bytes) < 1024 * 1024:
        mem = f"none measurable ({'+' if s.extra_memory_bytes >= 0 else '−'}{format_bytes(abs(s.extra_memory_bytes))})"
    else:
        mem = f"{'+' if s.extra_memory_bytes >= 0 else '−'}{format_bytes(abs(s.extra_memory_bytes))}"
    lines = [
        f"<span style='font-size:26px; font-weight:700; color:{color}'>"
        f"{s.speedup_median:.2f}×</span>&nbsp; <span style='color:{c.muted}'>median speedup · "
        f"{verdict}</span>",
        f"<span style='color:{c.muted}'>{spread}</span>",
        f"Off {s.off_tok_s:.1f} tok/s → on {s.on_tok_s:.1f} tok/s (medians)"
        + {"server": ", on as reported",
           "client": ", on from arrival times"}.get(s.rate_source, ""),
        f"{KIND_LABELS.get(s.kind, s.kind) if s.kind else 'The endpoint'}: "
        + (f"accepted {s.accepted}/{s.proposed} ({100 * (s.acceptance or 0):.0f}%), mean "
           f"{s.accept_len_mean or 0:.2f} per round"
           + (f"; {s.copied} of them copied from the context" if s.copied else "")
           if s.accepted is not None
           else "accepted drafts unknown (the endpoint does not report them)"),
        same,
        f"Extra memory with speculation: {mem}"
        + (" in peak MLX memory" if s.extra_memory_bytes is not None else "")
        + (f" (draft weights {format_bytes(s.draft_weights_bytes)})" if s.draft_weights_bytes else ""),
    ]
    if s.remote:
        lines.insert(2, f"<span style='color:{c.muted}'>On: {html.escape(s.remote)} · off: "
                     "plain decoding here</span>")
    if s.fallback:
        lines.append(f"<span style='color:{c.warn}'>Speculation did not run: "
                     f"{html.escape(s.fallback)}</span>")
    if s.contention_flagged and s.other_cores is not None:
        who = "Other programs (the endpoint too, if local)" if s.remote else "Other programs"
        lines.append(
            f"<span style='color:{c.warn}' title='CPU time other processes used during the "
            f"measurement, per second: {s.other_cores:.2f} cores on average'>{who} kept about "
            f"{s.other_cores:.1f} CPU cores busy during the measurement: the numbers may be "
            "noisy.</span>"
        )
    for n in s.notes:
        lines.append(f"<span style='color:{c.warn}'>{html.escape(n)}</span>")
    if partial:
        lines.append(f"<span style='color:{c.muted}'>Still measuring…</span>")
    return "<br>".join(lines)
