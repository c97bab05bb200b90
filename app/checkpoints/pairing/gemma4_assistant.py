"""Gemma 4 assistant drafting: the assistant was made for this target (a Gemma 4 model of
the same width and vocabulary). One sentence per refusal."""

from __future__ import annotations

from app.checkpoints.gemma4_assistant_config import TARGET_TYPES, assistant_settings
from app.checkpoints.inspect import CheckpointInfo
from app.checkpoints.pairing.report import BLOCKER, NOTE, FindingList


def gemma4_assistant_findings(t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
    a = assistant_settings(d.config or {})
    out.add("gemma4_assistant.detected", NOTE, "This is a Gemma 4 assistant (MTP drafter).",
            f"backbone_hidden_size {a['backbone_hidden_size']}, {a['num_hidden_layers']} layers")
    if t.model_type not in TARGET_TYPES:
        out.add("gemma4_assistant.other_family", BLOCKER,
                "A Gemma 4 assistant only drafts for Gemma 4 models.",
                f"target model_type {t.model_type}")
        return
    hidden = t.cfg().get("hidden_size")
    if isinstance(hidden, int) and a["backbone_hidden_size"] != hidden:
        out.add("gemma4_assistant.hidden_mismatch", BLOCKER,
                "This Gemma 4 assistant was made for a Gemma 4 model of another size.",
                f"backbone_hidden_size {a['backbone_hidden_size']} != target {hidden}")
    tv = t.effective_vocab
    if tv and a["vocab_size"] and a["vocab_size"] != tv:
        out.add("gemma4_assistant.vocab_mismatch", BLOCKER,
                "This Gemma 4 assistant was made for a model with a different vocabulary.",
                f"assistant vocab {a['vocab_size']} != target {tv}")
    if a["use_ordered_embeddings"]:
        out.add("gemma4_assistant.ordered_embeddings", BLOCKER,
                "This Gemma 4 assistant predicts through ordered embeddings, which DraftPair "
                "does not run yet.", "use_ordered_embeddings true")
