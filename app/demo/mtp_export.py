"""Writing the demo MTP head as shipped (``resources/demo-mtp``), with its model card.

The folder uses the split-drafter layout the engine reads (``mtp_weights.find_split``):
``config.json`` (``model_type: draftpair_mtp``, the target state it reads, the layer's
shape), ``model.safetensors`` (the trained module in float16: ``fc``, the two input norms,
``layers.0.*``, ``norm``), ``draft_head.json`` (the target ids of the reduced output layer,
whose rows are the target's own), ``curve.json`` and ``MODEL_CARD.md``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx

from app.demo.mtp_eval import FULL, MTP, RUN_ALONE
from app.engine.mlx_types import load_arrays


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def export(workdir: Path, out: Path, *, which: str = "best") -> Path:
    from app.demo.target import demo_target_dir
    from app.errors import DraftPairError

    run_dir = workdir / "mtp"
    src = run_dir / ("best" if which == "best" else "ckpt")
    weights_file = src / "weights.safetensors"
    if not weights_file.exists():
        raise DraftPairError(f"No {which} MTP checkpoint in {run_dir} (run demo mtp-train).")
    run = json.loads((run_dir / "run.json").read_text())
    meta = json.loads((src / "meta.json").read_text())
    target_cfg = json.loads((demo_target_dir() / "config.json").read_text())
    weights = {k: v.astype(mx.float16) for k, v in load_arrays(weights_file).items()}
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    shutil.copyfile(run_dir / "draft_head.json", out / "draft_head.json")
    keep = ("model_type", "hidden_size", "intermediate_size", "num_attention_heads",
            "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "vocab_size",
            "num_hidden_layers", "max_position_embeddings", "tie_word_embeddings")
    config = {
        "model_type": "draftpair_mtp",
        "hidden_state": run["config"]["hidden_state"],
        "mtp_num_hidden_layers": 1,
        "text_config": {k: target_cfg[k] for k in keep if k in target_cfg},
        "target": "SmolLM2-135M-Instruct (DraftPair demo target)",
        "step": meta.get("step"),
        "trained_minutes": round(float(meta.get("train_seconds", 0)) / 60, 1),
        "eval": meta.get("eval"),
        **({"warm_start": run["init_from"]} if run.get("init_from") else {}),
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    curve = _read_jsonl(run_dir / "curve.jsonl")
    (out / "curve.json").write_text(json.dumps(curve, indent=1) + "\n")
    evals = json.loads((run_dir / "eval.json").read_text()) if (run_dir / "eval.json").exists() \
        else {}
    head_size = len(json.loads((out / "draft_head.json").read_text())["token_ids"])
    (out / "MODEL_CARD.md").write_text(model_card(run, meta, curve, weights, evals, head_size))
    return out


_PROMPT_SETS = {
    "chat": "hand-written chat requests (`app/demo/chat_prompts.py`, none from the training "
            "prompt generator)",
    "heldout": "held-out prompts of the training prompt generator (never trained on)",
}


def _curve_table(curve: list[dict]) -> str:
    if not curve:
        return "(no evaluations recorded)\n"
    rows = ["| step | train min | positions seen | train records | held-out agreement | "
            "of it, replies to sampled requests | chained, given the first | loss |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in curve:
        chained = f"{r['chained']:.3f}" if "chained" in r else "-"
        chat = f"{r['agreement_chat']:.3f}" if "agreement_chat" in r else "-"
        rows.append(f"| {r['step']} | {r['minutes']:.1f} | {r['tokens_seen']} | "
                    f"{r['train_records']} | {r['agreement']:.3f} | {chat} | {chained} | "
                    f"{r['loss']:.3f} |")
    return "\n".join(rows) + "\n"


def engine_sections(evals: dict) -> str:
    """The card's engine tables, one per recorded ``mtp-eval --engine`` run, each with the
    command that reproduces it."""
    eng_lines = ""
    for which, eng in sorted((evals.get("engine_runs") or {}).items()):
        m, f = eng[MTP], eng[FULL]
        prompt_set = which.removesuffix(RUN_ALONE)
        alone = not eng.get("lookup_assist", True)
        eng_lines += (
            f"\nEngine, greedy, {eng['prompts']} {_PROMPT_SETS.get(prompt_set, prompt_set)}, up "
            f"to {eng['max_tokens']} tokens, plain / mtp / full-model rotated per prompt, "
            + ("the drafters alone" if alone else "prompt lookup beside the drafters (the default)")
            + f" (`draftpair demo mtp-eval --engine --prompt-set {prompt_set}"
            + (" --no-lookup-assist" if alone else "") + "`):\n\n"
            "| kind | speedup over plain (median) | range | accepted / round |"
            " tokens / verify | identical |\n|---|---:|---:|---:|---:|---:|\n"
            f"| mtp | {m['speedup_median']:.2f}x | {m['speedup_min']:.2f}-{m['speedup_max']:.2f}"
            f" | {m['accept_len_mean']:.2f} | {m['tokens_per_verify']:.2f} | "
            f"{m['identical']}/{eng['prompts']} |\n"
            f"| full-model (demo draft) | {f['speedup_median']:.2f}x | {f['speedup_min']:.2f}-"
            f"{f['speedup_max']:.2f} | {f['accept_len_mean']:.2f} | {f['tokens_per_verify']:.2f}"
            f" | {f['identical']}/{eng['prompts']} |\n")
        if eng.get("head_positions"):
            eng_lines += ("\nThe head's teacher-forced first-proposal agreement on these plain "
                          f"replies: {eng['head_agreement']:.3f} ({eng['head_positions']:,} "
                          "positions).\n")
    return eng_lines


def model_card(run: dict, meta: dict, curve: list[dict], weights: dict, evals: dict,
               head_size: int) -> str:
    n_params = sum(int(v.size) for v in weights.values())
    size_mb = sum(v.nbytes for v in weights.values()) / 1e6
    ev = meta.get("eval") or {}
    cfg = run["config"]
    chain_text = ""
    if cfg.get("chain_weight"):
        chain_text = (f", plus, weighted {cfg['chain_weight']}, the same loss for the chained "
                      "second proposal (the head's own output state as input, as the decode "
                      "loop chains)")
    warm_text = ""
    if run.get("init_from"):
        w = run["init_from"]
        warm_text = (f"- Warm start: the run began from the head in `{w.get('path')}` "
                     f"({w.get('trained_minutes')} minutes trained before, step {w.get('step')}"
                     "), on teacher-state features read again on this machine.\n")
    chat_text = ""
    if "chat" in ev:
        chat_text = (f"; on replies to held-out sampled requests alone "
                     f"**{ev['chat']['agreement']:.3f}** ({ev['chat']['positions']} positions)")
        if "generator" in ev:
            chat_text += f", on the generator's held-out prompts {ev['generator']['agreement']:.3f}"
    data_text = ""
    if meta.get("train_chat_records") or "chat" in ev:
        data_text = (" Also the target's greedy replies to requests it sampled itself from an "
                     "empty user turn (`draftpair demo teacher-self`: everyday wording no "
                     "template has; none of them hand-written), each seen "
                     f"{cfg.get('chat_weight', 1.0):g} times per epoch.")
    warm_flag = ""
    if run.get("init_from"):
        warm_flag = f" --init-from {run['init_from']['path']}"
        warm_flag += " --new-head-ids" if run["init_from"].get("new_head_ids") else ""
    tf = evals.get("teacher_forced") or {}
    setting_lines = ""
    if tf:
        setting_lines = (
            "\nWhich target state the head reads (held-out teacher-forced agreement of the "
            "first proposal, same weights, only the input state changed):\n\n"
            "| head input | agreement |\n|---|---:|\n"
            f"| post-final-norm state (trained with: {tf.get('trained_with')}) | "
            f"{tf['postnorm']['agreement']:.3f} |\n"
            f"| pre-final-norm state | {tf['prenorm']['agreement']:.3f} |\n")
    eng_lines = engine_sections(evals)
    return f"""# MTP head trained for the DraftPair demo target

A multi-token-prediction head for SmolLM2-135M-Instruct (which ships none), built by
`draftpair demo mtp-train` on this project's CPU. Same module as the Qwen3.5 / Qwen3-Next
`mtp` layer: `fc` (2H -> H) over the normed embedding of the next token and the normed target
state, one decoder layer of the target's kind (llama), a final norm, and the target's own
output layer restricted to the {head_size} most frequent target tokens
(`draft_head.json`; the rows are read from the target, not stored here). The embedding is the
target's too. Verification is exact: outputs are the target's own, token for token.

- Trainable parameters: {n_params / 1e6:.2f}M ({size_mb:.1f} MB in float16). Start: the
  decoder layer and final norm copied from the target's last layer and final norm.
- Reads the target's **{cfg['hidden_state']}** state (`hidden_state` in `config.json`;
  the engine feeds the head the state named there).
- Data: greedy replies of the target to the training prompt generator (`draftpair demo
  train --phase generate`), the target's own states over prompt + reply from one
  teacher-forced pass, cached once (the same pass gives the target's top-8 probabilities);
  loss on reply positions: cross-entropy to the target's next-next token plus those top-8
  probabilities as soft labels{chain_text}.{data_text}
- Trained {meta.get('train_seconds', 0) / 60:.0f} minutes of step time ({meta.get('step')}
  steps, {meta.get('tokens_seen')} positions seen), AdamW, peak lr {cfg['lr']}, cosine decay.
- Best held-out first-proposal agreement with the target (teacher-forced, prompts never
  trained on): **{ev.get('agreement', float('nan')):.3f}** over {ev.get('positions')} positions;
  the chained second proposal agrees on **{ev.get('chained', float('nan')):.3f}** of the
  positions where the first did{chat_text}.
{warm_text}{setting_lines}{eng_lines}
## Curve

{_curve_table(curve)}
## Rebuild or train further

```sh
draftpair demo teacher-restore --workdir TEACHER --no-soft-labels  # the kept replies
# or: draftpair demo train --phase generate --workdir TEACHER   # new replies (hours)
{"draftpair demo teacher-self --workdir TEACHER --minutes 45     # replies to sampled requests" + chr(10) if data_text else ""}draftpair demo mtp-train --teacher TEACHER --workdir RUN --train-minutes {cfg['train_minutes']:g} \\
    --batch-tokens {cfg['batch_tokens']} --chain-weight {cfg.get('chain_weight', 0):g} \\
    --chat-weight {cfg.get('chat_weight', 1.0):g}{warm_flag}
draftpair demo mtp-eval --teacher TEACHER --workdir RUN --engine
draftpair demo mtp-export --workdir RUN                    # writes resources/demo-mtp
```
"""
