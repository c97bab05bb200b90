"""Export a demo DFlash training run as a z-lab-layout drafter folder with a model card.

The folder (``resources/demo-dflash`` when shipped) holds ``config.json`` in the original
DFlash schema, ``model.safetensors`` (float16; ``fc``, ``hidden_norm``, ``layers.*``,
``norm``; no embedding or head: the target's are used), ``draft_head.json`` (the target
token ids its output is restricted to) and ``MODEL_CARD.md``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from app.errors import DraftPairError


def export(workdir: Path, out: Path, *, which: str = "best") -> Path:
    import mlx.core as mx

    from app.demo.dflash_train import Recipe, config_json, demo_config
    from app.demo.target import demo_target_dir
    from app.engine.mlx_types import load_arrays

    workdir, out = Path(workdir), Path(out)
    state_path = workdir / "state.json"
    ckpt = workdir / f"{which}.safetensors"
    if not state_path.exists() or not ckpt.exists():
        raise DraftPairError(f"No {which} DFlash checkpoint in {workdir} (train one first).")
    state = json.loads(state_path.read_text())
    saved = dict(state["recipe"])
    saved["init_layers"] = tuple(saved["init_layers"])
    recipe = Recipe(**saved)
    target_cfg = json.loads((demo_target_dir() / "config.json").read_text())
    cfg = demo_config(target_cfg, recipe)
    weights = {k: v.astype(mx.float16) for k, v in load_arrays(ckpt).items()}
    calibration, held = heldout_calibration(workdir, cfg, weights)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    config = config_json(cfg, head="draft_head.json")
    if calibration:
        config["draftpair_calibration"] = calibration
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    mx.save_safetensors(str(tmp / "model.safetensors"), weights, metadata={"format": "mlx"})
    shutil.copy(workdir / "draft_head.json", tmp / "draft_head.json")
    n_params = sum(int(v.size) for v in weights.values())
    size_mb = (tmp / "model.safetensors").stat().st_size / 1e6
    n_head = len(json.loads((workdir / "draft_head.json").read_text())["token_ids"])
    (tmp / "MODEL_CARD.md").write_text(model_card(state, cfg, recipe, n_params, size_mb, which,
                                                  n_head, held, calibration))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def heldout_calibration(workdir: Path, cfg, weights) -> tuple[list[float], dict]:
    """Per block position: held-out accuracy / mean confidence of the exported weights (the
    drafter scales its confidence by it when it sizes a round)."""
    import mlx.core as mx

    from app.demo.dflash_features import FeatureStore
    from app.demo.dflash_train import Batcher, DFlashModel, acceptance
    from app.demo.target import demo_target_dir
    from app.engine.mlx_types import load_lm
    from app.engine.models import dequantized_weight

    seqs = FeatureStore(workdir / "heldout").load()
    if not seqs:
        return [], {}
    target, _ = load_lm(str(demo_target_dir()))
    ids = json.loads((workdir / "draft_head.json").read_text())["token_ids"]
    embed = dequantized_weight(target.model.embed_tokens).astype(mx.float32)
    model = DFlashModel(cfg)
    model.load_weights(list(weights.items()))
    model.set_dtype(mx.float32)
    m = acceptance(model, embed[mx.array(ids)], Batcher(cfg, embed, ids, 2.0), seqs)
    cal = [round(min(1.0, a / c), 3) if c > 0 else 0.0
           for a, c in zip(m["pos_acc"], m["pos_conf"], strict=True)]
    return cal, m


def _warm_start(state: dict) -> str:
    w = state.get("warm_start")
    if not w:
        return ""
    r = w.get("recipe") or {}
    mins = w.get("train_seconds", 0) / 60
    curve = w.get("curve") or []
    last = curve[-1] if curve else {}
    return (f"This run started from the weights of an earlier run in the same folder "
            f"({mins:.0f} min, {w.get('step', '?')} steps, block size {r.get('block_size', '?')}, "
            f"position weights gamma {r.get('gamma', '?')}; its last held-out point: loss "
            f"{last.get('loss', '?')}, accepted/block {last.get('accepted', '?')}).\n\n")


def model_card(state: dict, cfg, recipe, n_params: int, size_mb: float, which: str,
               n_head: int, held: dict, calibration: list[float]) -> str:
    curve = state.get("curve") or []
    step = state.get("best_step") if which == "best" else state.get("step")
    rows = "\n".join(
        f"| {p['step']} | {p['minutes']} | {p['tokens']} | {p['loss']} | {p['accepted']} | "
        f"{p['accepted_k3']} | {' '.join(str(x) for x in p['pos_acc'])} |" for p in curve)
    return f"""# DraftPair demo DFlash drafter (SmolLM2-135M-Instruct)

A DFlash block drafter for DraftPair's built-in demo target, trained on this project's own
CPU in {state.get('train_seconds', 0) / 60:.0f} minutes. It is a demonstration of the draft
kind on a small model, not one of z-lab's published drafters, and it is only meant for the
demo target.

## What it is
- Layout and config as z-lab ships DFlash drafters (original schema): `fc`
  ({len(cfg.target_layer_ids)}x{cfg.hidden_size} -> {cfg.hidden_size}), `hidden_norm`,
  {cfg.num_hidden_layers} layer{'s' if cfg.num_hidden_layers != 1 else ''} of width {cfg.hidden_size} ({cfg.num_attention_heads} query
  / {cfg.num_key_value_heads} key-value heads, q/k norms, non-causal attention over
  `[context ; block]`), `norm`; the target's embedding and LM head.
- Reads the target's layer outputs {list(cfg.target_layer_ids)} (z-lab's spacing from 1 to
  N-3 for {len(cfg.target_layer_ids)} taps of a {cfg.num_target_layers}-layer target).
- Block size {cfg.block_size}: up to {cfg.block_size - 1} proposals per drafter pass; mask
  token {cfg.mask_token_id} (`<empty_output>`, never produced in chat).
- `draft_head.json`: the drafter's output reads the target's head at these
  {n_head} token ids only (the demo draft's list,
  the most frequent tokens of the teacher replies); verification is unchanged, so the output
  stays exactly the target's.
- {n_params / 1e6:.1f}M parameters, float16, {size_mb:.1f} MB. Layers were initialised from
  the target's layers {list(recipe.init_layers)}, the final norm from the target's.

## Training
Teacher data: greedy replies of the demo target to varied prompts (`draftpair demo train
--phase generate`); features: a teacher-forced target pass over prompt + reply. DFlash
recipe: random anchors in each reply (and the last prompt token), block
`[anchor token, MASK x {cfg.block_size - 1}]` that sees the context before the anchor and
its own block, cross-entropy on the masked positions weighted `exp(-(j-1)/{recipe.gamma})`.
AdamW, peak learning rate {recipe.lr}, {recipe.seqs} sequences x {recipe.anchors} blocks per
step, cosine decay over {recipe.minutes:.0f} planned minutes. Checkpoint: {which}
(step {step}).

Held-out (teacher replies to prompts never trained on): "accepted" is the mean run of
correct leading proposals per block (greedy), at the full block and at 3 proposals, then the
accuracy at each block position.

| step | minutes | teacher tokens | loss | accepted | accepted (3) | per position |
|---|---|---|---|---|---|---|
{rows}

Exported weights (float16) on the same held-out replies: accepted/block
{held.get('accepted', 0):.3f}, per position accuracy {held.get('pos_acc')}, mean confidence
{held.get('pos_conf')}; `draftpair_calibration` in config.json (accuracy / confidence per
position, {calibration}) scales the drafter's confidence when it decides how many of its
block's tokens a round sends.

{_warm_start(state)}Exported {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.

## Rebuild
```
draftpair demo train --phase generate            # teacher replies (hours on a CPU)
draftpair demo train-dflash --teacher <that workdir> --layers {recipe.layers} \\
    --block-size {recipe.block_size} --taps {recipe.n_taps} --lr {recipe.lr} --minutes {recipe.minutes:.0f}
draftpair demo export-dflash
```
"""
