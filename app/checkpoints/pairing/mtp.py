"""MTP drafting: the target ships a multi-token-prediction head."""

from __future__ import annotations

from app.checkpoints.inspect import MTP_FAMILIES, CheckpointInfo
from app.checkpoints.pairing.report import BLOCKER, NOTE, WARNING, FindingList


def mtp_findings(t: CheckpointInfo, out: FindingList) -> None:
    cfg = t.cfg()
    declared = cfg.get("mtp_num_hidden_layers") or cfg.get("num_nextn_predict_layers")
    if not t.mtp_tensors:
        detail = "no mtp.* / eh_proj tensors in the safetensors headers"
        if declared:
            detail += f" although config declares {declared} MTP layer(s) (a conversion probably dropped them)"
        out.add(
            "mtp.no_weights",
            BLOCKER,
            "This model has no multi-token-prediction head in its files, so MTP drafting is impossible.",
            detail,
        )
        return
    out.add(
        "mtp.weights_present",
        NOTE,
        "The model ships a multi-token-prediction head.",
        f"{len(t.mtp_tensors)} MTP tensors, e.g. {t.mtp_tensors[0]}",
    )
    if t.model_type not in MTP_FAMILIES:
        out.add(
            "mtp.family_unknown",
            WARNING,
            "DraftPair does not know this model family's prediction head and may not run it.",
            f"model_type {t.model_type}",
        )
