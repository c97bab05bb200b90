"""DFlash drafting: the drafter was made for this target (hidden size, layers, vocabulary,
mask token)."""

from __future__ import annotations

from app.checkpoints.inspect import CheckpointInfo
from app.checkpoints.pairing.report import BLOCKER, NOTE, FindingList


def dflash_findings(t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
    if d.dflash is None:
        out.add(
            "draft.not_dflash",
            BLOCKER,
            "This draft is not a DFlash drafter.",
            f"architectures={d.architectures}; no dflash_config",
        )
        return
    df, tc = d.dflash, t.cfg()
    n_layers = tc.get("num_hidden_layers")
    out.add(
        "dflash.detected",
        NOTE,
        "This is a DFlash drafter.",
        f"layout {df['layout']}, block_size {df['block_size']}, target_layer_ids {df['target_layer_ids']}",
    )
    if df.get("hidden_size") and tc.get("hidden_size") and df["hidden_size"] != tc["hidden_size"]:
        out.add(
            "dflash.hidden_mismatch",
            BLOCKER,
            "This DFlash drafter was made for a different target model.",
            f"draft hidden_size {df['hidden_size']} != target {tc['hidden_size']}",
        )
    if df.get("num_target_layers") and n_layers and df["num_target_layers"] != n_layers:
        out.add(
            "dflash.layers_mismatch",
            BLOCKER,
            "This DFlash drafter was made for a target with a different number of layers.",
            f"num_target_layers {df['num_target_layers']} != target num_hidden_layers {n_layers}",
        )
    ids = df.get("target_layer_ids")
    if not isinstance(ids, list) or not ids:
        out.add(
            "dflash.config_incomplete",
            BLOCKER,
            "The DFlash drafter's settings are incomplete.",
            "dflash_config.target_layer_ids missing",
        )
    elif n_layers and any(not isinstance(i, int) or i >= n_layers for i in ids):
        out.add(
            "dflash.layers_mismatch",
            BLOCKER,
            "This DFlash drafter reads target layers that this target does not have.",
            f"target_layer_ids {ids} vs {n_layers} layers",
        )
    mask = df.get("mask_token_id")
    tv = t.effective_vocab
    dv = d.cfg().get("vocab_size")
    if isinstance(dv, int) and tv and dv != tv:
        out.add(
            "dflash.vocab_mismatch",
            BLOCKER,
            "This DFlash drafter was made for a target with a different vocabulary.",
            f"draft vocab_size {dv} != target vocab {tv}",
        )
    if mask is None:
        out.add(
            "dflash.config_incomplete",
            BLOCKER,
            "The DFlash drafter's settings are incomplete.",
            "mask_token_id missing",
        )
    elif tv and mask >= tv:
        out.add(
            "dflash.mask_out_of_range",
            BLOCKER,
            "This DFlash drafter uses a token the target does not have.",
            f"mask_token_id {mask} >= target vocab {tv}",
        )
