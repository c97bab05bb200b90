"""Export a demo EAGLE-3 training run as a drafter folder in vLLM's ``speculators`` layout.

The folder (``resources/demo-eagle3`` when shipped) holds ``config.json``
(``Eagle3Speculator``: ``transformer_layer_config``, ``draft_vocab_size``,
``eagle_aux_hidden_state_layer_ids``, the verifier named), ``model.safetensors`` (float16
``fc``, ``layers.0.*``, ``norm``, ``lm_head`` over the reduced vocabulary; ``d2t`` offsets and
the ``t2d`` mask; no embedding: the target's is used), ``curve.json`` (the held-out curve) and
``MODEL_CARD.md``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from app.errors import DraftPairError

VERIFIER = "HuggingFaceTB/SmolLM2-135M-Instruct"


def export(workdir: Path, out: Path, *, which: str = "best") -> Path:
    import mlx.core as mx

    from app.demo.dflash_train import demo_head_ids
    from app.demo.eagle3_train import Recipe, config_json, demo_config, drafter_arrays
    from app.demo.target import demo_target_dir
    from app.engine.mlx_types import load_arrays

    workdir, out = Path(workdir), Path(out)
    state_path = workdir / "state.json"
    ckpt = workdir / f"{which}.safetensors"
    if not state_path.exists() or not ckpt.exists():
        raise DraftPairError(f"No {which} EAGLE-3 checkpoint in {workdir} (train one first).")
    state = json.loads(state_path.read_text())
    recipe = Recipe(**state["recipe"])
    target_cfg = json.loads((demo_target_dir() / "config.json").read_text())
    head_ids = sorted(demo_head_ids())
    cfg = demo_config(target_cfg, len(head_ids))
    trained = load_arrays(ckpt)
    n_params = sum(int(v.size) for v in trained.values())
    weights = drafter_arrays(trained, head_ids, cfg.vocab_size)
    held = heldout_acceptance(workdir, cfg, recipe, weights)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    config = config_json(cfg, target_cfg, VERIFIER)
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    mx.save_safetensors(str(tmp / "model.safetensors"), weights, metadata={"format": "mlx"})
    (tmp / "curve.json").write_text(json.dumps(state.get("curve") or [], indent=1) + "\n")
    size_mb = (tmp / "model.safetensors").stat().st_size / 1e6
    (tmp / "MODEL_CARD.md").write_text(model_card(state, cfg, recipe, n_params, size_mb, which,
                                                  held, config))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def heldout_acceptance(workdir: Path, cfg: Any, recipe: Any, weights: dict) -> dict:
    """The exported (float16) weights on the run's held-out replies."""
    import mlx.core as mx

    from app.demo.dflash_features import FeatureStore
    from app.demo.dflash_train import demo_head_ids
    from app.demo.eagle3_train import Batcher, acceptance
    from app.demo.target import demo_target_dir
    from app.engine.drafters.eagle3_model import Eagle3Model
    from app.engine.mlx_types import load_lm
    from app.engine.models import dequantized_weight

    seqs = FeatureStore(workdir / "heldout").load()
    if not seqs:
        return {}
    target, _ = load_lm(str(demo_target_dir()))
    embed = dequantized_weight(target.model.embed_tokens).astype(mx.float32)
    model = Eagle3Model(cfg)
    model.load_weights([(k, v) for k, v in weights.items() if k not in ("d2t", "t2d")])
    model.set_dtype(mx.float32)
    return acceptance(model, Batcher(embed, sorted(demo_head_ids()), cfg.vocab_size, recipe),
                      seqs)


def model_card(state: dict, cfg: Any, recipe: Any, n_params: int, size_mb: float, which: str,
               held: dict, config: dict) -> str:
    curve = state.get("curve") or []
    step = state.get("best_step") if which == "best" else state.get("step")
    rows = "\n".join(
        f"| {p['step']} | {p['minutes']} | {p['tokens']} | {p['loss']} | {p['accepted']} | "
        f"{' '.join(str(x) for x in p['step_acc'])} |" for p in curve)
    ids = config["eagle_aux_hidden_state_layer_ids"]
    history = "".join(f"\n{line}\n" for line in state.get("history") or [])
    return f"""# DraftPair demo EAGLE-3 drafter (SmolLM2-135M-Instruct)

An EAGLE-3 drafter for DraftPair's built-in demo target, trained on this project's own CPU
in {state.get('train_seconds', 0) / 60:.0f} minutes. It is a demonstration of the draft kind
on a small model, not a published drafter, and it is only meant for the demo target.

## What it is
- vLLM `speculators` layout (`Eagle3Speculator`): `fc` (3x{cfg.target_hidden_size} ->
  {cfg.hidden_size}), one decoder layer whose attention reads `[embedding ; hidden]`
  ({cfg.num_attention_heads} query / {cfg.num_key_value_heads} key-value heads of
  {cfg.head_dim}), `norm`, `lm_head` over its own vocabulary of {cfg.draft_vocab_size} tokens.
- Reads the target's hidden states {ids} (the paper's low / middle / high layers; 0-based
  decoder layers {[i - 1 for i in ids]}).
- `d2t` maps each draft token to the target's (the demo draft's list: the most frequent
  tokens of the teacher replies); `t2d` marks them. Verification is unchanged, so the output
  stays exactly the target's.
- {n_params / 1e6:.1f}M parameters, float16, {size_mb:.1f} MB. The head started as the
  target's embedding rows of its vocabulary, the final norm as the target's, the MLP and
  output projection from the target's decoder layer {recipe.mlp_from} (counting from 0).

## Training
Teacher data: greedy replies of the demo target to varied prompts (the project's archive
`training/demo-teacher.jsonl.xz`); features: a teacher-forced target pass over prompt +
reply. Training-time test as the EAGLE-3 paper does it: {recipe.depth} steps, step 0 reads
the target's rows, each later step the drafter's own outputs of the step before; cross-entropy
on reply tokens (what the target produced itself), step j weighted {recipe.step_decay}^j.
AdamW, peak learning rate {recipe.lr}, {recipe.seqs} sequences of up to {recipe.max_len}
tokens per step, cosine decay over {recipe.minutes:.0f} planned minutes. Checkpoint: {which}
(step {step}).

Held-out (teacher replies to prompts never trained on): "accepted" is the mean run of correct
leading proposals of a greedy chain of {recipe.depth} started at each reply position; then the
accuracy of each step's proposal.

| step | minutes | teacher tokens | loss | accepted | per step |
|---|---|---|---|---|---|
{rows}
{history}
Exported weights (float16) on the same held-out replies, a token outside the drafter's
vocabulary counted as a miss (as in drafting): accepted per chain
{held.get('accepted', 0):.3f}, per step {held.get('step_acc')} ({held.get('chains', 0)}
chains).

Exported {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.

## Rebuild
```
draftpair demo train-eagle3 --minutes {recipe.minutes:.0f} --lr {recipe.lr} --depth {recipe.depth} \\
    --seqs {recipe.seqs} --max-len {recipe.max_len} --warmup {recipe.warmup}
draftpair demo export-eagle3
```
"""
