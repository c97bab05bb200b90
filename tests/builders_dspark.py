"""Tiny DSpark drafters for tests: the DFlash tiny qwen3 target (builders_dflash) and a
drafter folder as mlx-vlm 0.7.10 reads one (``model_type: "dspark"``, DFlash's June 2026
config with ``projector_type: "dspark"``, ``markov_rank`` and ``sample_from_anchor`` in
``dflash_config``; ``block_size`` is the proposal count), weights from a seeded numpy RNG."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests import builders_dflash as bd

RANK = 8


def config(vocab: int, mask_token_id: int, *, proposals: int = 4, sample_from_anchor: bool = True,
           confidence: bool = False, target_layer_ids=(1, 3)) -> dict:
    cfg = bd.dflash_config("2026", vocab=vocab, mask_token_id=mask_token_id,
                           block_size=proposals, target_layer_ids=target_layer_ids)
    cfg["model_type"] = "dspark"
    cfg["architectures"] = ["Qwen3DSparkModel"]
    cfg["dflash_config"].update({"projector_type": "dspark", "markov_rank": RANK,
                                 "sample_from_anchor": sample_from_anchor,
                                 "enable_confidence_head": confidence})
    return cfg


def weights(cfg: dict, *, seed: int = 7) -> dict[str, np.ndarray]:
    w = bd.dflash_weights(cfg, seed=seed)
    rng = np.random.default_rng(seed + 2000)
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    w["markov_head.markov_w1.weight"] = rng.standard_normal((vocab, RANK)).astype(np.float32)
    w["markov_head.markov_w2.weight"] = (
        2.0 * rng.standard_normal((vocab, RANK)) / np.sqrt(RANK)).astype(np.float32)
    if cfg["dflash_config"].get("enable_confidence_head"):
        w["confidence_head.proj.weight"] = rng.standard_normal((1, h + RANK)).astype(np.float32)
        w["confidence_head.proj.bias"] = np.zeros((1,), np.float32)
    return w


def make_pair(root: Path, *, seed: int = 7, **kw) -> tuple[Path, Path]:
    root = Path(root)
    target = root / "target"
    if not (target / "config.json").exists():
        bd.make_qwen3_target(target)
    vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    cfg = config(vocab, bd.mask_token(target), **kw)
    name = f"dspark-{seed}" + "".join(f"-{k}{v}" for k, v in sorted(kw.items()))
    return target, bd.make_dflash_folder(root / name.replace(" ", ""), cfg,
                                         weights=weights(cfg, seed=seed))
