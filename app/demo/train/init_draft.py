"""The draft's shape and how it starts: from scratch (PCA embedding) or from target layers;
the reduced output head it predicts over."""

from __future__ import annotations

from dataclasses import dataclass

from app.checkpoints.chat_prompt import chat_text
from app.demo.train.workdir import DEFAULT_HEAD_SIZE
from app.errors import DraftPairError


@dataclass
class DraftShape:
    hidden_size: int = 192
    num_hidden_layers: int = 4
    num_attention_heads: int = 3
    num_key_value_heads: int = 3
    intermediate_size: int = 768
    head_size: int = DEFAULT_HEAD_SIZE  # reduced output head (number of target token ids)
    # Initialise from the target instead of from scratch: these target layers (in order) become
    # the draft's layers; width, heads, MLP, embedding and final norm are the target's, and
    # the embedding (tied output layer) stays frozen. Shipped with a 4-bit embedding.
    target_layers: list[int] | None = None
    embed_bits: int = 4  # shipped precision of the frozen embedding (target_layers runs)
    embed_group: int = 64


def draft_config(target_cfg: dict, shape: DraftShape) -> dict:
    if shape.target_layers:
        n = int(target_cfg["num_hidden_layers"])
        if not all(0 <= i < n for i in shape.target_layers):
            raise DraftPairError(f"--from-target-layers: the target has layers 0..{n - 1}.")
        keep = ("architectures", "model_type", "hidden_size", "intermediate_size",
                "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
                "rope_theta", "max_position_embeddings", "vocab_size", "attention_bias",
                "mlp_bias", "hidden_act", "bos_token_id", "eos_token_id", "pad_token_id")
        cfg = {k: target_cfg[k] for k in keep if k in target_cfg}
        cfg.update(num_hidden_layers=len(shape.target_layers), tie_word_embeddings=True,
                   torch_dtype="float16")
        return cfg
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "head_dim": shape.hidden_size // shape.num_attention_heads,
        "rms_norm_eps": 1e-5,
        "rope_theta": target_cfg.get("rope_theta", 100000.0),
        "max_position_embeddings": target_cfg.get("max_position_embeddings", 8192),
        "vocab_size": target_cfg["vocab_size"],
        "tie_word_embeddings": True,
        "attention_bias": False,
        "mlp_bias": False,
        "hidden_act": "silu",
        "bos_token_id": target_cfg.get("bos_token_id"),
        "eos_token_id": target_cfg.get("eos_token_id"),
        "pad_token_id": target_cfg.get("pad_token_id"),
        "torch_dtype": "float16",
    }


def build_draft(config: dict):
    from mlx_lm.models import llama

    args = llama.ModelArgs.from_dict(config)
    return llama.Model(args)


def pca_embedding(target_embed, dim: int):
    """Project the target's token embedding onto its top ``dim`` principal directions."""
    import mlx.core as mx
    import numpy as np

    e = np.array(target_embed.astype(mx.float32))
    mu = e.mean(axis=0, keepdims=True)
    x = e - mu
    cov = x.T @ x / x.shape[0]
    vals, vecs = np.linalg.eigh(cov)
    top = vecs[:, np.argsort(vals)[::-1][:dim]]
    proj = x @ top
    proj = proj / proj.std() * float(e.std())
    return mx.array(proj.astype(np.float32))


def copy_target_layers(draft, target, layers: list[int]) -> None:
    """Give ``draft`` the target's embedding, final norm and the chosen decoder layers."""
    from app.engine.mlx_types import flat_arrays

    src = dict(flat_arrays(target.parameters()))
    new = []
    for name, _ in flat_arrays(draft.parameters()):
        if name.startswith("model.layers."):
            parts = name.split(".")
            parts[2] = str(layers[int(parts[2])])
            new.append((name, src[".".join(parts)]))
        else:
            new.append((name, src[name]))
    draft.load_weights(new)


def quantize_roundtrip(w, bits: int, group: int):
    import mlx.core as mx

    q = mx.quantize(w, group_size=group, bits=bits)
    return mx.dequantize(*q, group_size=group, bits=bits).astype(w.dtype)


def choose_head(records: list[dict], size: int, always: list[int],
                vocab_size: int = 49152) -> list[int]:
    """Top-``size`` target token ids by frequency in the teacher data (+ ``always``).

    Counts reply tokens and the teacher's top-k candidates (what the target considered), then
    prompt tokens; when the data holds fewer distinct tokens than ``size``, fills up with the
    lowest ids (byte-level BPE assigns low ids to early, frequent merges).
    """
    from collections import Counter

    c: Counter = Counter()
    for r in records:
        c.update(r["reply_ids"])
        for row in r.get("topk_ids") or []:
            c.update(row[:4])
    p: Counter = Counter()
    for r in records:
        p.update(r["prompt_ids"])
    ids = set(int(t) for t in always)
    for counter in (c, p):
        for t, _ in counter.most_common():
            if len(ids) >= size:
                break
            ids.add(int(t))
    t = 0
    while len(ids) < size and t < vocab_size:
        ids.add(t)
        t += 1
    return sorted(ids)


def special_ids(tok) -> list[int]:
    """EOS / chat-template tokens and everything the template renders, always in the head."""
    ids = set(int(i) for i in tok.eos_token_ids)
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"}]
    text = chat_text(tok, msgs, add_generation_prompt=False)
    ids.update(int(i) for i in tok.encode(text, add_special_tokens=False))
    ids.update(int(i) for i in tok.encode("\n\n", add_special_tokens=False))
    return sorted(ids)
