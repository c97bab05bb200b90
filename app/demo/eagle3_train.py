"""Training the demo EAGLE-3 drafter (``draftpair demo train-eagle3``), resumable.

Recipe as in the EAGLE-3 paper, at demo scale: the drafter reads the target's low, middle and
high layer outputs (the paper's ``[2, N/2, N-3]`` hidden states) over teacher sequences and
learns to predict the target's next tokens with *training-time test*: step 0 reads the
target's rows, each later step reads the drafter's own outputs of the step before, exactly as
a chain of drafting does (``Eagle3Model.train_steps``). The loss is cross-entropy over the
drafter's reduced vocabulary (the demo draft's 8192 most frequent teacher tokens; ``d2t``
maps them back), on the positions whose label is a token the target produced itself (the
teacher's greedy replies), step ``j`` weighted ``step_decay ** j``.

The drafter's head starts as the target's (tied) embedding rows of the reduced vocabulary,
its final norm as the target's final norm, its MLP from one target layer: it starts where the
target's own head would read, and learns the rest.

The job alternates: layer features for more teacher records (cached on disk,
``dflash_features.FeatureStore``), a training chunk, a held-out evaluation, a checkpoint
(model + optimizer + state). Progress goes to ``WORKDIR/train.log``.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.demo.dflash_features import FeatureStore, Sequence, extract
from app.demo.run_state import cosine_lr, save_run


@dataclass
class Recipe:
    depth: int = 4  # training-time test steps (proposals a chain drafts)
    lr: float = 1.5e-3
    warmup: int = 30
    minutes: float = 60.0  # planned training time; the learning rate decays over it
    seqs: int = 2  # sequences per step
    max_len: int = 512  # tokens of each sequence a step reads
    step_decay: float = 0.8
    mlp_from: int = 15  # the target layer the MLP starts from
    weight_decay: float = 0.0
    seed: int = 0


def capture_layers(n_target_layers: int) -> list[int]:
    """0-based decoder layers read: the paper's hidden-state indices ``[2, N/2, N-3]``."""
    from app.checkpoints.eagle3_config import default_layer_ids

    return [i - 1 for i in default_layer_ids(n_target_layers)]


def demo_config(target_cfg: dict, draft_vocab: int) -> Any:
    from app.engine.drafters.eagle3_model import Eagle3Config

    h = int(target_cfg["hidden_size"])
    heads = int(target_cfg["num_attention_heads"])
    return Eagle3Config(
        layout="speculators", hidden_size=h, num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=int(target_cfg["num_key_value_heads"]),
        head_dim=int(target_cfg.get("head_dim") or h // heads),
        intermediate_size=int(target_cfg["intermediate_size"]),
        rms_norm_eps=float(target_cfg.get("rms_norm_eps", 1e-5)),
        rope_theta=float(target_cfg.get("rope_theta", 10000.0)),
        vocab_size=int(target_cfg["vocab_size"]), draft_vocab_size=draft_vocab,
        target_hidden_size=h, layer_ids=None,
    )


def config_json(c: Any, target_cfg: dict, verifier: str) -> dict:
    """The drafter's config.json in vLLM's ``speculators`` layout."""
    from app.checkpoints.eagle3_config import FORMAT_NAME, default_layer_ids

    n = int(target_cfg["num_hidden_layers"])
    layer = {
        "model_type": "llama", "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size, "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim,
        "rms_norm_eps": c.rms_norm_eps, "vocab_size": c.vocab_size, "rope_theta": c.rope_theta,
        "max_position_embeddings": int(target_cfg.get("max_position_embeddings", 8192)),
        "tie_word_embeddings": False,
    }
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": FORMAT_NAME,
        "speculators_version": "0.2.0",
        "transformer_layer_config": layer,
        "draft_vocab_size": c.draft_vocab_size,
        "norm_before_residual": False,
        "target_hidden_size": c.target_hidden_size,
        "eagle_aux_hidden_state_layer_ids": default_layer_ids(n),
        "speculators_config": {
            "algorithm": FORMAT_NAME,
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 4,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier,
                         "architectures": list(target_cfg.get("architectures") or [])},
        },
        "torch_dtype": "float16",
    }


def drafter_arrays(weights: dict[str, Any], head_ids: list[int], vocab: int) -> dict[str, Any]:
    """The trained weights as a drafter folder stores them: float16, with ``d2t`` (draft id
    ``j`` -> target id ``j + d2t[j]``) and ``t2d`` (which target ids the drafter speaks)."""
    import mlx.core as mx

    out = {k: v.astype(mx.float16) for k, v in weights.items()}
    keep = np.asarray(sorted(head_ids), dtype=np.int64)
    out["d2t"] = mx.array(keep - np.arange(len(keep), dtype=np.int64))
    t2d = np.zeros(vocab, dtype=bool)
    t2d[keep] = True
    out["t2d"] = mx.array(t2d)
    return out


def init_from_target(model: Any, target: Any, head_ids: list[int], mlp_from: int) -> None:
    import mlx.core as mx

    from app.engine.models import dequantized_weight

    inner = target.model
    embed = dequantized_weight(inner.embed_tokens).astype(mx.float32)
    model.lm_head.weight = embed[mx.array(head_ids)]
    model.norm.weight = inner.norm.weight
    t = inner.layers[mlp_from]
    layer = model.layers[0]
    for name in ("gate_proj", "up_proj", "down_proj"):
        getattr(layer.mlp, name).weight = getattr(t.mlp, name).weight
    layer.post_attention_layernorm.weight = t.post_attention_layernorm.weight
    layer.self_attn.o_proj.weight = t.self_attn.o_proj.weight


class Batcher:
    """One sequence's training inputs: embeddings per step, the target rows, labels and
    weights over the draft vocabulary."""

    def __init__(self, embed: Any, head_ids: list[int], vocab: int, recipe: Recipe):
        self.embed = embed  # frozen target embedding table (V, H), float32
        lut = np.full(vocab, -1, dtype=np.int32)
        lut[np.asarray(head_ids)] = np.arange(len(head_ids), dtype=np.int32)
        self.lut = lut
        self.r = recipe

    def make(self, s: Sequence, rng: random.Random | None) -> tuple:
        import mlx.core as mx

        r = self.r
        total = len(s.tokens)
        start = 0
        if total > r.max_len:  # a window that keeps some of the reply
            hi = max(0, total - r.max_len)
            start = rng.randint(0, hi) if rng is not None else 0
        toks = s.tokens[start: start + r.max_len]
        feats = s.features[start: start + len(toks)]
        plen = s.prompt_len - start
        n = len(toks) - 1  # rows 0..n-1 pair with tokens 1..n
        padded = np.concatenate([toks, np.zeros(r.depth + 1, dtype=np.int32)])
        embeds = [self.embed[mx.array(padded[1 + j: 1 + j + n])] for j in range(r.depth)]
        targets = []  # per step: (rows with a label, their labels, their weight)
        in_reply = []  # per step: rows whose token is the target's own (labelled or not)
        for j in range(r.depth):
            pos = np.arange(n) + 2 + j  # row p of step j predicts the token at p + 2 + j
            tok = padded[np.minimum(pos, len(padded) - 1)]
            ids = self.lut[tok]
            reply = (pos < len(toks)) & (pos >= plen)
            rows = np.nonzero(reply & (ids >= 0))[0]  # the drafter can say the token
            targets.append((mx.array(rows.astype(np.int32)), mx.array(ids[rows]),
                            float(r.step_decay ** j)))
            in_reply.append(reply)
        return embeds, mx.array(np.asarray(feats[:n], dtype=np.float32)), targets, in_reply


def loss_fn(model: Any, batch: list[tuple]) -> Any:
    import mlx.core as mx
    import mlx.nn as nn

    total = mx.array(0.0)
    weight = mx.array(0.0)
    for embeds, feats, targets, _reply in batch:
        outs = model.train_steps(embeds, feats)
        for h, (rows, labels, w) in zip(outs, targets, strict=True):
            if rows.size == 0:
                continue
            ce = nn.losses.cross_entropy(model.logits(h[rows]), labels, reduction="sum")
            total = total + w * ce
            weight = weight + w * rows.size
    return total / mx.maximum(weight, 1e-6)


def acceptance(model: Any, batcher: Batcher, seqs: list[Sequence]) -> dict:
    """Held-out: per step the accuracy of the drafter's greedy proposal, and the mean run of
    leading correct proposals of a chain started at each reply position (what a greedy round
    of ``depth`` proposals keeps). A token outside the drafter's vocabulary is a miss, as
    in drafting."""
    import mlx.core as mx

    depth = batcher.r.depth
    correct = np.zeros(depth)
    runs, n_chains = 0.0, 0
    for s in seqs:
        embeds, feats, targets, in_reply = batcher.make(s, None)
        outs = model.train_steps(embeds, feats)
        n = int(feats.shape[0])
        ok = np.zeros((depth, n), dtype=bool)
        for j, (h, (rows, labels, _w)) in enumerate(zip(outs, targets, strict=True)):
            if rows.size == 0:
                continue
            r = np.array(rows)
            ok[j, r] = np.array(mx.argmax(model.logits(h[rows]), axis=-1) == labels)
        valid = np.stack(in_reply).all(axis=0)  # chains whose every step is in the reply
        ok = ok[:, valid]
        lead = np.cumprod(ok, axis=0)
        runs += float(lead.sum())
        correct += ok.sum(axis=1)
        n_chains += int(valid.sum())
    n = max(n_chains, 1)
    return {"chains": n_chains, "accepted": runs / n,
            "step_acc": [round(float(x) / n, 3) for x in correct]}


class Trainer:
    def __init__(self, workdir: Path, target: Any, target_cfg: dict, head_ids: list[int],
                 recipe: Recipe, log: Any):
        import mlx.core as mx
        import mlx.nn as nn
        import mlx.optimizers as optim

        from app.engine.drafters.eagle3_model import Eagle3Model
        from app.engine.models import dequantized_weight

        self.workdir = workdir
        self.log = log
        workdir.mkdir(parents=True, exist_ok=True)
        state_path = workdir / "state.json"
        self.state = json.loads(state_path.read_text()) if state_path.exists() else {}
        if self.state.get("recipe"):
            saved = dict(self.state["recipe"])
            saved["minutes"] = recipe.minutes
            recipe = Recipe(**saved)
        self.recipe = recipe
        self.cfg = demo_config(target_cfg, len(head_ids))
        embed = dequantized_weight(target.model.embed_tokens).astype(mx.float32)
        self.batcher = Batcher(embed, head_ids, self.cfg.vocab_size, recipe)
        self.model = Eagle3Model(self.cfg)
        ckpt = workdir / "latest.safetensors"
        if ckpt.exists():
            self.model.load_weights(str(ckpt))
        else:
            init_from_target(self.model, target, head_ids, recipe.mlp_from)
        self.model.set_dtype(mx.float32)
        mx.eval(self.model.parameters())
        self.opt = optim.AdamW(learning_rate=recipe.lr, weight_decay=recipe.weight_decay)
        opt_path = workdir / "optimizer.safetensors"
        if opt_path.exists():
            from mlx.utils import tree_unflatten

            from app.engine.mlx_types import load_arrays

            self.opt.state = tree_unflatten(list(load_arrays(opt_path).items()))
        self.state.setdefault("step", 0)
        self.state.setdefault("train_seconds", 0.0)
        self.state.setdefault("curve", [])
        self.state["recipe"] = asdict(recipe)
        self.rng = random.Random(recipe.seed + self.state["step"])
        self.grad = nn.value_and_grad(self.model, loss_fn)

    def lr(self, elapsed: float) -> float:
        r = self.recipe
        return cosine_lr(r.lr, r.warmup, r.minutes, self.state["step"], elapsed)

    def train(self, seqs: list[Sequence], seconds: float, max_steps: int | None = None) -> float:
        import mlx.core as mx

        r = self.recipe
        start = time.monotonic()
        losses: list[float] = []
        while time.monotonic() - start < seconds and (max_steps is None
                                                      or len(losses) < max_steps):
            picks = self.rng.sample(seqs, min(r.seqs, len(seqs)))
            batch = [self.batcher.make(s, self.rng) for s in picks]
            self.opt.learning_rate = self.lr(self.state["train_seconds"]
                                             + time.monotonic() - start)
            loss, grads = self.grad(self.model, batch)
            self.opt.update(self.model, grads)
            mx.eval(loss, self.model.parameters(), self.opt.state)
            losses.append(float(loss))
            self.state["step"] += 1
        self.state["train_seconds"] += time.monotonic() - start
        return float(np.mean(losses)) if losses else float("nan")

    def evaluate(self, heldout: list[Sequence]) -> dict:
        return acceptance(self.model, self.batcher, heldout)

    def save(self, metrics: dict | None) -> None:
        save_run(self.workdir, self.model, self.opt, self.state,
                 metrics["accepted"] if metrics is not None else None)


def teacher_records(archive: Path) -> tuple[list[dict], list[dict]]:
    """(training, held-out) teacher records of the project's archive."""
    from app.demo.teacher_archive import read_archive

    train: list[dict] = []
    held: list[dict] = []
    for r in read_archive(archive):
        (held if r.get("split") == "heldout" else train).append(r)
    return train, held


def run(workdir: Path, archive: Path, recipe: Recipe, *, chunk_minutes: float = 4.0,
        feature_minutes: float = 4.0, heldout_n: int = 24, log: Any = print) -> None:
    """The whole job: features, then alternate training chunks with new features, until
    ``recipe.minutes`` of training are done. Safe to stop and restart at any time."""
    from app.demo.dflash_train import demo_head_ids
    from app.demo.target import ensure_demo_target
    from app.engine.mlx_types import load_lm

    workdir.mkdir(parents=True, exist_ok=True)
    path = ensure_demo_target(log)
    target, _tok = load_lm(str(path))
    target_cfg = json.loads((path / "config.json").read_text())
    head_ids = sorted(demo_head_ids())
    tr = Trainer(workdir, target, target_cfg, head_ids, recipe, log)
    layers = capture_layers(int(target_cfg["num_hidden_layers"]))
    log(f"eagle3: reads target layers {layers} (0-based), draft vocabulary {len(head_ids)}, "
        f"depth {tr.recipe.depth}, step {tr.state['step']}, "
        f"{tr.state['train_seconds'] / 60:.1f} of {recipe.minutes:.0f} min trained")
    train_records, held_records = teacher_records(archive)
    rng = random.Random(0)
    rng.shuffle(train_records)
    train_store = FeatureStore(workdir / "features")
    held_store = FeatureStore(workdir / "heldout")
    extract(target, held_records[:heldout_n], held_store, layers, seconds=600, log=log)
    heldout = held_store.load()
    while tr.state["train_seconds"] < recipe.minutes * 60:
        extract(target, train_records, train_store, layers, seconds=feature_minutes * 60,
                log=log)
        seqs = train_store.load()
        if not seqs:
            raise RuntimeError("no teacher records to train on")
        left = recipe.minutes * 60 - tr.state["train_seconds"]
        loss = tr.train(seqs, min(chunk_minutes * 60, left))
        m = tr.evaluate(heldout)
        point = {"step": tr.state["step"], "minutes": round(tr.state["train_seconds"] / 60, 1),
                 "tokens": sum(len(s.tokens) for s in seqs), "loss": round(loss, 4),
                 "accepted": round(m["accepted"], 3), "step_acc": m["step_acc"]}
        tr.state["curve"].append(point)
        tr.save(m)
        log(f"eagle3: step {point['step']} ({point['minutes']} min, {point['tokens']} tokens) "
            f"loss {loss:.3f}; held-out accepted per chain of {tr.recipe.depth} "
            f"{m['accepted']:.3f}, per step {m['step_acc']}")
    log("eagle3: training done")
