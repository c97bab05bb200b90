"""Full-model drafting: a small causal LM of its own, with the target's tokens, and smaller."""

from __future__ import annotations

from app.checkpoints.inspect import KIND_DFLASH, KIND_EAGLE3, CheckpointInfo
from app.checkpoints.pairing.report import BLOCKER, NOTE, WARNING, FindingList
from app.checkpoints.pairing.tokenizers import tokenizer_findings, vocab_findings


def full_model_findings(t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
    if d.kind == KIND_DFLASH:
        out.add(
            "draft.is_dflash",
            BLOCKER,
            "This draft is a DFlash drafter, not a model that writes on its own; use the DFlash mode.",
            f"architectures={d.architectures}",
        )
        return
    if d.kind == KIND_EAGLE3:
        out.add(
            "draft.is_eagle3",
            BLOCKER,
            "This draft is an EAGLE-3 drafter, not a model that writes on its own; use the EAGLE-3 mode.",
            f"architectures={d.architectures}",
        )
        return
    if d.mtp_tensors and len(d.mtp_tensors) == len(d.weights.tensors if d.weights else {}):
        out.add(
            "draft.mtp_only",
            BLOCKER,
            "This draft holds only a prediction head, not a full model.",
            "only MTP tensors",
        )
    vocab_findings(t, d, out)
    tokenizer_findings(t, d, out)
    size_findings(t, d, out)


def size_findings(t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
    tp, dp = t.param_count, d.param_count
    if not (tp and dp):
        return
    ratio = dp / tp
    if ratio >= 1 and d.path.resolve() != t.path.resolve():
        out.add(
            "draft.not_smaller",
            WARNING,
            "The draft is not smaller than the target, so it will slow things down.",
            f"draft {dp:,} params vs target {tp:,}",
        )
    else:
        out.add(
            "draft.size_ratio",
            NOTE,
            f"The draft is {ratio:.1%} of the target's size.",
            f"draft {dp:,} params, target {tp:,}",
        )
