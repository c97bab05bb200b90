"""Write tests/golden/dflash_golden.npz: what two public DFlash implementations compute on the
tiny random-weight pairs of tests/builders_dflash.py. test_dflash.py compares DraftPair's
drafter against these arrays; neither reference is a dependency or part of the product.

References (run from the repository root, with the project's Python):
  z-lab/dflash ``dflash/model_mlx.py``: its own round loop (``stream_generate``, greedy) on
      the tiny qwen3 target with the original-schema drafter -> every block it drafted
      (start position, first token, drafter logits) and the output tokens; and its network
      on the network scenario of the original schema.
  mlx-vlm 0.7.10 ``speculative/drafters/qwen3_dflash``: its network on the network scenarios
      of both schemas (the June 2026 one with and without a sliding layer).

    python tests/golden/make_dflash_golden.py \
        --zlab /path/to/model_mlx.py --mlx-vlm /work/ref/mlx_vlm_src

``--zlab`` may also be a git directory of the z-lab/dflash repository (its HEAD is read).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests import builders_dflash as bd  # noqa: E402

OUT = Path(__file__).with_name("dflash_golden.npz")


def load_zlab(src: Path):
    src = Path(src)
    source_note = str(src)
    if src.is_dir():
        text = subprocess.run(["git", "--git-dir", str(src), "show", "HEAD:dflash/model_mlx.py"],
                              check=True, capture_output=True, text=True).stdout
        rev = subprocess.run(["git", "--git-dir", str(src), "rev-parse", "HEAD"], check=True,
                             capture_output=True, text=True).stdout.strip()
        source_note = f"z-lab/dflash@{rev} dflash/model_mlx.py"
        tmp = Path(tempfile.mkdtemp()) / "zlab_model_mlx.py"
        tmp.write_text(text)
        src = tmp
    spec = importlib.util.spec_from_file_location("zlab_model_mlx", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, source_note


def load_mlx_vlm(src: Path):
    """mlx-vlm's qwen3_dflash drafter without importing the whole package (its __init__
    pulls in vision and audio stacks); PIL is only needed by image helpers."""
    root = Path(src) / "mlx_vlm"
    for name, sub in [("mlx_vlm", ""), ("mlx_vlm.models", "models"),
                      ("mlx_vlm.speculative", "speculative"),
                      ("mlx_vlm.speculative.drafters", "speculative/drafters")]:
        m = types.ModuleType(name)
        m.__path__ = [str(root / sub)]
        sys.modules[name] = m
    for n in ("PIL", "PIL.Image"):
        sys.modules.setdefault(n, types.ModuleType(n))
    sys.modules["PIL"].Image = sys.modules["PIL.Image"]
    mod = importlib.import_module("mlx_vlm.speculative.drafters.qwen3_dflash")
    version = (root / "version.py").read_text().split("=")[-1].strip().strip("\"'")
    return mod, f"mlx-vlm {version} speculative/drafters/qwen3_dflash"


def zlab_draft(z, folder: Path):
    import mlx.core as mx

    cfg = json.loads((folder / "config.json").read_text())
    config = z.DFlashConfig(
        hidden_size=cfg["hidden_size"], num_hidden_layers=cfg["num_hidden_layers"],
        num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"], head_dim=cfg["head_dim"],
        intermediate_size=cfg["intermediate_size"], vocab_size=cfg["vocab_size"],
        rms_norm_eps=cfg["rms_norm_eps"], rope_theta=cfg["rope_theta"],
        max_position_embeddings=cfg["max_position_embeddings"], block_size=cfg["block_size"],
        target_layer_ids=tuple(cfg["dflash_config"]["target_layer_ids"]),
        num_target_layers=cfg["num_target_layers"],
        mask_token_id=cfg["dflash_config"]["mask_token_id"],
        rope_scaling=cfg.get("rope_scaling"))
    calls: list[dict] = []

    class Recorder(z.DFlashDraftModel):
        def __call__(self, inputs, target_hidden, cache):
            start = cache[0].offset + target_hidden.shape[1]
            out = super().__call__(inputs, target_hidden, cache)
            mx.eval(out)
            calls.append({"start": int(start), "first": int(inputs[0, 0].item()),
                          "logits": np.array(out[0, 1:].astype(mx.float32))})
            return out

    model = Recorder(config)
    model.load_weights(str(folder / "model.safetensors"))
    return model, calls


def run_zlab_loop(z, target_dir: Path, draft_dir: Path) -> dict:
    from mlx_lm import load

    target, tok = load(str(target_dir))
    draft, calls = zlab_draft(z, draft_dir)
    tokens = []
    for r in z.stream_generate(target, draft, tok, list(bd.PROMPT),
                               max_tokens=bd.LOOP_MAX_TOKENS, temperature=0.0):
        tokens.extend(r.tokens)
    return {"tokens": np.array(tokens, np.int32),
            "starts": np.array([c["start"] for c in calls], np.int32),
            "firsts": np.array([c["first"] for c in calls], np.int32),
            "widths": np.array([len(c["logits"]) for c in calls], np.int32),
            "logits": np.stack([_pad(c["logits"], draft.config.block_size - 1)
                                for c in calls])}


def _pad(a: np.ndarray, rows: int) -> np.ndarray:
    return np.concatenate([a, np.zeros((rows - len(a), a.shape[1]), a.dtype)]) if len(a) < rows else a


def run_net(model, target, cfg: dict, steps, make_cache) -> np.ndarray:
    """Drafter logits (B-1, V) per pass of a network scenario."""
    import mlx.core as mx

    b = bd_block(cfg)
    cache = make_cache()
    out = []
    for feats, first in bd.net_inputs(cfg, steps):
        block = mx.array([[first] + [cfg["dflash_config"]["mask_token_id"]] * (b - 1)])
        logits = model(block, mx.array(feats), cache)
        out.append(np.array(logits[0, 1:].astype(mx.float32)))
    return np.stack(out)


def bd_block(cfg: dict) -> int:
    return int(cfg.get("block_size") or cfg["dflash_config"]["block_size"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zlab", type=Path, required=True)
    ap.add_argument("--mlx-vlm", type=Path, required=True)
    args = ap.parse_args()
    import mlx.core as mx
    from mlx_lm import load

    z, z_note = load_zlab(args.zlab)
    v, v_note = load_mlx_vlm(args.mlx_vlm)
    out: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target_dir, orig = bd.make_pair(root, "original")
        _, new = bd.make_pair(root, "2026")
        _, slide = bd.make_pair(root, "2026", sliding_window=6)
        loop = run_zlab_loop(z, target_dir, orig)
        out.update({f"loop_{k}": a for k, a in loop.items()})
        target, _ = load(str(target_dir))
        # z-lab network, original schema
        zm, _ = zlab_draft(z, orig)
        zm.bind(target)
        cfg = json.loads((orig / "config.json").read_text())
        out["net_zlab_original"] = run_net(zm, target, cfg, bd.NET_STEPS["original"],
                                           zm.make_cache)
        # mlx-vlm network, all three folders
        for key, folder in (("original", orig), ("2026", new), ("2026-sw6", slide)):
            cfg = json.loads((folder / "config.json").read_text())
            vm = v.DFlashDraftModel(v.ModelConfig.from_dict(cfg))
            weights = vm.sanitize(dict(mx.load(str(folder / "model.safetensors"))))
            vm.load_weights(list(weights.items()))
            vm.bind(target)
            out[f"net_mlxvlm_{key}"] = run_net(vm, target, cfg, bd.NET_STEPS[key],
                                               vm.make_cache)
    out["sources"] = np.array(json.dumps({"zlab": z_note, "mlx_vlm": v_note}))
    np.savez_compressed(OUT, **out)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes): {z_note}; {v_note}")
    print(f"loop: {len(loop['starts'])} blocks drafted, {len(loop['tokens'])} tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
