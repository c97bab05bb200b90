"""MTP drafting: the target ships a multi-token-prediction head."""

from __future__ import annotations

from app.checkpoints import mtp_source
from app.checkpoints.inspect import MTP_FAMILIES, CheckpointInfo
from app.checkpoints.pairing.report import BLOCKER, NOTE, WARNING, FindingList


def builtin_head(t: CheckpointInfo):
    """(is a built-in target that has its own MTP head, that head's folder if present)."""
    from pathlib import Path

    from app.checkpoints import builtins

    for b in builtins.registered():
        head = builtins.get(f"{b.name}-mtp")
        if head is None:
            continue
        path = b.present()
        if path is not None and Path(path).resolve() == Path(t.path).resolve():
            return True, head.present()
    return False, None


def _fc_shape_problem(t: CheckpointInfo, tensors: dict) -> str | None:
    """The head's input projection must map 2H -> H for this target's width H."""
    hidden = t.cfg().get("hidden_size")
    if not tensors or not isinstance(hidden, int):
        return None
    for name in tensors:
        if not name.endswith(("mtp.fc.weight", "eh_proj.weight")):
            continue
        info = tensors.get(name)
        shape = tuple(info.shape) if info is not None and info.shape else ()
        packed = name.removesuffix("weight") + "scales" in tensors
        if len(shape) != 2 or shape == (hidden, 2 * hidden) or (packed and shape[0] == hidden):
            continue
        return f"{name} is {shape}, expected ({hidden}, {2 * hidden})"
    return None


def mtp_findings(t: CheckpointInfo, out: FindingList) -> None:
    declared = mtp_source.declared_layers(t.config)
    builtin, head = builtin_head(t) if not t.mtp_tensors else (False, None)
    if builtin:
        if head is not None:
            out.add("mtp.builtin_head", NOTE,
                    "The MTP head trained for the demo is used (the demo model has none of "
                    "its own).", str(head))
        else:
            out.add("mtp.builtin_missing", BLOCKER,
                    "The MTP head trained for the demo is not included in this build.",
                    "draftpair demo mtp-train builds one")
        return
    if not t.mtp_tensors:
        restored = mtp_source.beside(t.path)
        if restored:
            out.add("mtp.weights_beside", NOTE,
                    "The model's multi-token-prediction head is kept beside it.",
                    f"{len(restored)} tensors in {t.path / mtp_source.HEAD_DIR}")
            shape = _fc_shape_problem(t, restored)
            if shape:
                out.add("mtp.wrong_shapes", BLOCKER,
                        "The multi-token-prediction head beside the model does not fit it (its "
                        "shapes are wrong), so MTP drafting is impossible.", shape)
            _family(t, out)
            return
        if declared:
            source = mtp_source.base_model(t.path)
            out.add(
                "mtp.dropped",
                BLOCKER,
                "This conversion dropped the model's multi-token-prediction head, so MTP "
                "drafting needs it back first.",
                f"config declares {declared} MTP layer(s) but no mtp.* / eh_proj tensors are in "
                f"the files; `draftpair models fetch-mtp {t.path}"
                + (f"` fetches only the head from {source}" if source
                   else " --from SOURCE_REPO` fetches only the head from the source model"),
            )
            return
        out.add(
            "mtp.no_weights",
            BLOCKER,
            "This model has no multi-token-prediction head in its files, so MTP drafting is impossible.",
            "no mtp.* / eh_proj tensors in the safetensors headers",
        )
        return
    out.add(
        "mtp.weights_present",
        NOTE,
        "The model ships a multi-token-prediction head.",
        f"{len(t.mtp_tensors)} MTP tensors, e.g. {t.mtp_tensors[0]}",
    )
    shape = _fc_shape_problem(t, t.weights.tensors if t.weights else {})
    if shape:
        out.add("mtp.wrong_shapes", BLOCKER,
                "The model's multi-token-prediction head does not fit the model (its shapes "
                "are wrong), so MTP drafting is impossible.", shape)
    _family(t, out)


def _family(t: CheckpointInfo, out: FindingList) -> None:
    if t.model_type not in MTP_FAMILIES:
        out.add(
            "mtp.family_unknown",
            WARNING,
            "DraftPair does not know this model family's prediction head and may not run it.",
            f"model_type {t.model_type}",
        )
