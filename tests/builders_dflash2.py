"""Tiny DFlash 2 drafters for tests: the DFlash tiny qwen3 target (builders_dflash) and a
drafter folder as mlx-vlm 0.7.10 reads one (``model_type: "dflash2"``, DFlash's June 2026
config plus the convolutions' and the candidate selector's settings in ``dflash_config``),
weights from a seeded numpy RNG."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests import builders_dflash as bd

KERNEL, GROUP, RANK, TOP_K = 3, 16, 8, 8


def config(vocab: int, mask_token_id: int, *, block_size: int = 4,
           target_layer_ids=(1, 3), hidden: int = bd.HIDDEN) -> dict:
    cfg = bd.dflash_config("2026", vocab=vocab, mask_token_id=mask_token_id,
                           block_size=block_size, target_layer_ids=target_layer_ids,
                           hidden=hidden)
    cfg["model_type"] = "dflash2"
    cfg["architectures"] = ["DFlash2DraftModel"]
    cfg["dflash_config"].update({
        "conv_kernel_size": KERNEL, "conv_group_size": GROUP, "selector_rank": RANK,
        "selector_top_k": TOP_K, "input_embedding_scale": 1.0, "output_multiplier": 1.0,
        "runtime_block_size": block_size,
    })
    return cfg


def weights(cfg: dict, *, seed: int = 6) -> dict[str, np.ndarray]:
    w = bd.dflash_weights(cfg, seed=seed)
    rng = np.random.default_rng(seed + 1000)
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    groups = h // GROUP
    for i in range(cfg["num_hidden_layers"]):
        for conv in ("attention_conv", "mlp_conv"):
            p = f"layers.{i}.{conv}."
            base = np.zeros((2, KERNEL, h), np.float32)
            base[:, 0] = 1.0  # mostly the position itself, some of the ones before
            base += 0.2 * rng.standard_normal(base.shape).astype(np.float32)
            w[p + "base_kernel"] = base
            w[p + "kernel_projection.weight"] = (
                0.1 * rng.standard_normal((2 * KERNEL * groups, h)) / np.sqrt(h)
            ).astype(np.float32)
    w["candidate_selector.predecessor_codebook"] = rng.standard_normal((vocab, RANK)).astype(
        np.float32)
    w["candidate_selector.successor_codebook"] = rng.standard_normal((vocab, RANK)).astype(
        np.float32)
    w["candidate_selector.hidden_projection.weight"] = (
        rng.standard_normal((RANK, h)) / np.sqrt(h)).astype(np.float32)
    return w


def make_pair(root: Path, *, seed: int = 6, **kw) -> tuple[Path, Path]:
    root = Path(root)
    target = root / "target"
    if not (target / "config.json").exists():
        bd.make_qwen3_target(target)
    vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    cfg = config(vocab, bd.mask_token(target), **kw)
    name = f"dflash2-{seed}" + "".join(f"-{k}{v}" for k, v in sorted(kw.items()))
    return target, bd.make_dflash_folder(root / name.replace(" ", ""), cfg,
                                         weights=weights(cfg, seed=seed))
