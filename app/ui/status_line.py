"""The status bar's model line: what is loaded and which drafter the chat uses now.

Sizes are the checkpoint folders' sizes on disk, from the same function the Models table reads
(``app.checkpoints.store.dir_size``), so the two views show one figure; the memory the weights
take once loaded (larger on the CPU, where they are float32) is in the tooltip, named as such.
"""

from __future__ import annotations

from app import kinds
from app.ui.draft_picker import runs_draft_model
from app.ui.format import KIND_LABELS, format_bytes
from app.ui.worker import ModelState


def drafter_words(state: ModelState, kind: str) -> str:
    """The drafter in use for ``kind``, in words (the draft model only when the kind runs it)."""
    if kinds.is_off(kind):
        return "no speculation"
    if runs_draft_model(kind):
        if not state.draft:
            return "draft model: none loaded"
        return f"draft model {state.draft} ({format_bytes(state.draft_disk_bytes)})"
    return KIND_LABELS.get(kind, kind)


def model_status(state: ModelState, kind: str) -> tuple[str, str]:
    """(one short line, its tooltip with the details)."""
    if not state.target:
        return "No model loaded", ""
    text = (f"{state.target} ({format_bytes(state.target_disk_bytes)}) · "
            f"chat: {drafter_words(state, kind)} · loaded in {state.load_seconds:.1f} s")
    tip = [f"Target {state.target}: {format_bytes(state.target_disk_bytes)} on disk, "
           f"{format_bytes(state.target_bytes)} in memory ({state.precision})"]
    if state.draft:
        tip.append(f"Draft model {state.draft}: {format_bytes(state.draft_disk_bytes)} on disk, "
                   f"{format_bytes(state.draft_bytes)} in memory"
                   + ("" if runs_draft_model(kind)
                      else " (not used by the chat's speculation now)"))
    tip.append(f"Chat speculation: {KIND_LABELS.get(kind, kind)}")
    return text, "\n".join(tip)
