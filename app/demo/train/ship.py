"""Export a checkpoint as a shippable mlx-lm folder (weights at their shipped precision,
``draft_head.json``, tokenizer files, model card)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from app.demo.train.card import model_card

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def ship_weights(weights: dict, shape: dict, config: dict, *, layer_bits: int = 6,
                 group: int = 64) -> tuple[dict, dict]:
    """fp16 weights for a from-scratch draft; for a draft started from target layers (whose
    49152 x 576 embedding alone is 57 MB in fp16) the frozen embedding is stored with the
    bits it was trained at and the linear layers at ``layer_bits`` (0: fp16), in mlx-lm's
    quantized format so ``mlx_lm.load`` reads it. Returns (weights, config)."""
    import mlx.core as mx

    config = dict(config)
    if not shape.get("target_layers"):
        return {k: v.astype(mx.float16) for k, v in weights.items()}, config
    out = {}
    eb, eg = int(shape.get("embed_bits", 4)), int(shape.get("embed_group", 64))
    quant: dict[str, dict[str, Any]] = {}
    for name, v in weights.items():
        base, leaf = name.rsplit(".", 1)
        is_emb = base == "model.embed_tokens"
        bits, g = (eb, eg) if is_emb else (layer_bits, group)
        if leaf == "weight" and v.ndim == 2 and bits:
            qw, sc, bi = mx.quantize(v.astype(mx.float32), group_size=g, bits=bits)
            out[f"{base}.weight"] = qw
            out[f"{base}.scales"] = sc.astype(mx.float16)
            out[f"{base}.biases"] = bi.astype(mx.float16)
            quant[base] = {"group_size": g, "bits": bits, "mode": "affine"}
        else:
            out[name] = v.astype(mx.float16)
    if quant:
        top = (next((q for b, q in quant.items() if b != "model.embed_tokens"), None)
               or quant["model.embed_tokens"])
        config["quantization"] = {**top, **quant}
    return out, config


def export(workdir: Path, out: Path, *, which: str = "best", layer_bits: int = 6) -> Path:
    """Write a checkpoint as an fp16 mlx-lm llama folder with draft_head.json and a card."""
    import shutil

    import mlx.core as mx

    from app.demo.target import ensure_demo_target
    from app.engine.mlx_types import load_arrays

    src = workdir / ("best" if which == "best" else "checkpoint")
    if not (src / "model.safetensors").is_file():
        raise RuntimeError(f"no {which} checkpoint in {workdir}")
    run = json.loads((workdir / "run.json").read_text())
    meta = json.loads((src / "meta.json").read_text())
    head = json.loads((workdir / "draft_head.json").read_text())
    target = ensure_demo_target()
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    trained = load_arrays(src / "model.safetensors")
    n_params = sum(int(v.size) for v in trained.values())
    w, config = ship_weights(trained, run["shape"], run["config"], layer_bits=layer_bits)
    mx.save_safetensors(str(tmp / "model.safetensors"), w, metadata={"format": "mlx"})
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (tmp / "draft_head.json").write_text(json.dumps(head, separators=(",", ":")) + "\n")
    for name in TOKENIZER_FILES:
        shutil.copy2(target / name, tmp / name)
    gen_cfg = target / "generation_config.json"
    if gen_cfg.is_file():
        shutil.copy2(gen_cfg, tmp / "generation_config.json")
    (tmp / "MODEL_CARD.md").write_text(
        model_card(workdir, run, meta, head, w, n_params=n_params, config=config))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out
