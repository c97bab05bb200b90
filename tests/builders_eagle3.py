"""Tiny EAGLE-3 drafters for tests, in both published layouts, for a tiny qwen3 target
(``builders_dflash.make_qwen3_target``): the original one (``LlamaForCausalLMEagle3``, flat
config with ``draft_vocab_size``, the layer as ``midlayer.*``, target layers unwritten) and
vLLM's ``speculators`` format (``transformer_layer_config``, ``speculators_config`` naming the
verifier, ``eagle_aux_hidden_state_layer_ids``, the layer as ``layers.0.*``). Weights come from
a seeded numpy RNG, so both layouts of one seed hold the same numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.builders_dflash import HEAD_DIM, HEADS, HIDDEN, KV_HEADS, make_qwen3_target

TARGET_LAYERS = 8  # the paper's layers of 8: hidden_states [2, 4, 5]
PAPER_IDS = [2, TARGET_LAYERS // 2, TARGET_LAYERS - 3]


def layer_config(vocab: int, hidden: int = HIDDEN) -> dict:
    return {
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
    }


def original_config(vocab: int, draft_vocab: int, hidden: int = HIDDEN) -> dict:
    cfg = layer_config(vocab, hidden)
    cfg.update({"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": draft_vocab,
                "torch_dtype": "float32"})
    return cfg


def speculators_config(vocab: int, draft_vocab: int, *, layer_ids=PAPER_IDS,
                       hidden: int = HIDDEN, verifier_arch: str = "Qwen3ForCausalLM",
                       norm_before_residual: bool = False) -> dict:
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.2.0",
        "transformer_layer_config": layer_config(vocab, hidden),
        "draft_vocab_size": draft_vocab,
        "norm_before_residual": norm_before_residual,
        "target_hidden_size": None,
        "eagle_aux_hidden_state_layer_ids": list(layer_ids),
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": "tiny/target", "architectures": [verifier_arch]},
        },
        "torch_dtype": "float32",
    }


def weights(vocab: int, draft_vocab: int, *, seed: int = 3, hidden: int = HIDDEN,
            target_hidden: int | None = None) -> dict[str, np.ndarray]:
    """Speculators-format names; ``d2t`` (int64 offsets) and ``t2d`` (bool) when the draft
    vocabulary is smaller: it keeps a seeded subset of the target's tokens, in order."""
    rng = np.random.default_rng(seed)
    th = target_hidden or hidden
    qd, kd, inter = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, 2 * hidden

    def lin(o: int, i: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((o, i)) * scale / np.sqrt(i)).astype(np.float32)

    def norm(d: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32)

    p = "layers.0."
    w = {
        "fc.weight": lin(hidden, 3 * th),
        p + "input_layernorm.weight": norm(hidden),
        p + "hidden_norm.weight": norm(hidden),
        p + "self_attn.q_proj.weight": lin(qd, 2 * hidden, 2.0),
        p + "self_attn.k_proj.weight": lin(kd, 2 * hidden, 2.0),
        p + "self_attn.v_proj.weight": lin(kd, 2 * hidden, 4.0),
        p + "self_attn.o_proj.weight": lin(hidden, qd, 3.0),
        p + "post_attention_layernorm.weight": norm(hidden),
        p + "mlp.gate_proj.weight": lin(inter, hidden),
        p + "mlp.up_proj.weight": lin(inter, hidden),
        p + "mlp.down_proj.weight": lin(hidden, inter),
        "norm.weight": norm(hidden),
        "lm_head.weight": lin(draft_vocab, hidden, 3.0),
    }
    if draft_vocab != vocab:
        keep = np.sort(rng.choice(vocab, size=draft_vocab, replace=False))
        w["d2t"] = (keep - np.arange(draft_vocab)).astype(np.int64)
        t2d = np.zeros(vocab, dtype=bool)
        t2d[keep] = True
        w["t2d"] = t2d
    return w


def write_folder(folder: Path, cfg: dict, w: dict[str, np.ndarray], *,
                 layout: str = "speculators") -> Path:
    """Write ``cfg`` and the weights, named as ``layout`` names them."""
    import mlx.core as mx

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    named = {(("midlayer." + k[len("layers.0."):]) if layout == "original"
              and k.startswith("layers.0.") else k): v for k, v in w.items()}
    arrays = {k: mx.array(v.astype(np.uint8) if v.dtype == bool else v)
              for k, v in named.items()}
    if "t2d" in arrays:
        arrays["t2d"] = arrays["t2d"].astype(mx.bool_)
    mx.save_safetensors(str(folder / "model.safetensors"), arrays)
    return folder


def target_vocab(target: Path) -> int:
    return int(json.loads((Path(target) / "config.json").read_text())["vocab_size"])


def make_target(root: Path) -> Path:
    target = Path(root) / "target"
    if not (target / "config.json").exists():
        make_qwen3_target(target, num_layers=TARGET_LAYERS)
    return target


def make_pair(root: Path, layout: str, *, reduced: bool = True, seed: int = 3,
              **spec_kwargs) -> tuple[Path, Path]:
    """(target, drafter folder) with the same weights for either ``layout``."""
    target = make_target(root)
    vocab = target_vocab(target)
    dv = vocab // 2 if reduced else vocab
    w = weights(vocab, dv, seed=seed)
    if layout == "original":
        cfg = original_config(vocab, dv)
    else:
        cfg = speculators_config(vocab, dv, **spec_kwargs)
    name = f"eagle3-{layout}-{'reduced' if reduced else 'full'}-{seed}"
    if spec_kwargs:
        name += "-" + "-".join(f"{k}{v}" for k, v in sorted(spec_kwargs.items()))
    return target, write_folder(Path(root) / name.replace(" ", ""), cfg, w, layout=layout)


def make_gemma4_target(folder: Path, *, seed: int = 4) -> Path:
    """A tiny Gemma 4 text model (mlx-lm's gemma4_text: sliding and full layers, KV shared by
    the last two layers, per-layer inputs, logit soft-capping), random weights."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm.models import gemma4_text
    from mlx_lm.utils import save_config, save_model

    from tests.builders import write_tokenizer

    folder = Path(folder)
    n = write_tokenizer(folder)
    cfg = {"model_type": "gemma4_text", "architectures": ["Gemma4ForCausalLM"],
           "hidden_size": HIDDEN, "num_hidden_layers": 6, "intermediate_size": 2 * HIDDEN,
           "num_attention_heads": HEADS, "head_dim": HEAD_DIM, "global_head_dim": 2 * HEAD_DIM,
           "num_key_value_heads": KV_HEADS, "num_kv_shared_layers": 2,
           "hidden_size_per_layer_input": 8, "vocab_size": n, "vocab_size_per_layer_input": n,
           "sliding_window": 8, "sliding_window_pattern": 3, "max_position_embeddings": 2048,
           "use_double_wide_mlp": False, "final_logit_softcapping": 30.0,
           "tie_word_embeddings": True, "torch_dtype": "float32"}
    model = gemma4_text.Model(gemma4_text.ModelArgs.from_dict(cfg))
    rng = np.random.default_rng(seed)
    params = []
    for name, p in tree_flatten(model.parameters()):
        w = (1.0 + 0.1 * rng.standard_normal(p.shape)) if name.endswith("norm.weight") \
            else 0.3 * rng.standard_normal(p.shape)
        params.append((name, mx.array(w.astype(np.float32))))
    model.update(tree_unflatten(params))
    mx.eval(model.parameters())
    save_model(folder, model)
    save_config(cfg, config_path=folder / "config.json")
    return folder
