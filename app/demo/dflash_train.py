"""Training the demo DFlash drafter (``draftpair demo train-dflash``), resumable.

Recipe as in the DFlash paper: per sequence, random anchor positions in the reply; each
anchor makes one block ``[token at anchor, MASK x (B-1)]`` at positions anchor..anchor+B-1
that sees the context features of the positions before the anchor and its own block
(bidirectionally), never other blocks; cross-entropy on the B-1 masked positions against the
tokens that follow the anchor, weighted ``exp(-(j-1)/gamma)`` so early positions (the ones
that get accepted) count most. Context features are the target's layer outputs over the
teacher sequence (``dflash_features``); the target's embedding and head stay frozen, the
head reduced to the demo draft's token list (``draft_head.json``).

The job loop alternates: features for new teacher records (the teacher generator may still be
writing), a training chunk, a held-out evaluation, a checkpoint (model + optimizer + state).
Progress goes to ``WORKDIR/train.log``.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from app.demo.dflash_features import FeatureStore, Sequence, extract
from app.demo.run_state import cosine_lr, save_run
from app.engine.drafters.dflash_model import DFlashConfig, DFlashModel, default_layer_ids

MASK_TOKEN = 16  # <empty_output>: a special token the chat template never emits


@dataclass
class Recipe:
    layers: int = 1
    n_taps: int = 4
    block_size: int = 8
    init_layers: tuple[int, ...] = (0,)  # target layers the drafter layers start from
    lr: float = 1.5e-3
    warmup: int = 100
    minutes: float = 60.0  # planned training time; the learning rate decays over it
    seqs: int = 4  # sequences per step
    anchors: int = 24  # blocks per sequence
    gamma: float = 2.0  # position weights exp(-(j-1)/gamma): early positions get accepted
    weight_decay: float = 0.01
    seed: int = 0


def demo_config(target_cfg: dict, r: Recipe) -> DFlashConfig:
    n = int(target_cfg["num_hidden_layers"])
    return DFlashConfig(
        hidden_size=int(target_cfg["hidden_size"]),
        num_hidden_layers=r.layers,
        num_attention_heads=int(target_cfg["num_attention_heads"]),
        num_key_value_heads=int(target_cfg["num_key_value_heads"]),
        head_dim=int(target_cfg.get("head_dim") or
                     target_cfg["hidden_size"] // target_cfg["num_attention_heads"]),
        intermediate_size=int(target_cfg["intermediate_size"]),
        vocab_size=int(target_cfg["vocab_size"]),
        rms_norm_eps=float(target_cfg.get("rms_norm_eps", 1e-5)),
        rope_theta=float(target_cfg.get("rope_theta", 10000.0)),
        max_position_embeddings=int(target_cfg.get("max_position_embeddings", 8192)),
        block_size=r.block_size,
        mask_token_id=MASK_TOKEN,
        target_layer_ids=tuple(default_layer_ids(n, r.n_taps)),
        num_target_layers=n,
    )


def config_json(c: DFlashConfig, *, head: str | None = None) -> dict:
    """The z-lab (original schema) config.json of a drafter."""
    out = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "intermediate_size": c.intermediate_size,
        "vocab_size": c.vocab_size,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta,
        "max_position_embeddings": c.max_position_embeddings,
        "block_size": c.block_size,
        "num_target_layers": c.num_target_layers,
        "dflash_config": {"mask_token_id": c.mask_token_id,
                          "target_layer_ids": list(c.target_layer_ids)},
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
    }
    if head:
        out["draftpair_head"] = head
    return out


def init_from_target(model: DFlashModel, target, layers: tuple[int, ...]) -> None:
    """Drafter layers start as copies of target layers (projections, MLP, norms); the final
    norm as the target's final norm (it feeds the target's head)."""
    inner = target.model
    for mine, src in zip(model.layers, layers, strict=False):
        t = inner.layers[src]
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(mine.self_attn, name).weight = getattr(t.self_attn, name).weight
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(mine.mlp, name).weight = getattr(t.mlp, name).weight
        mine.input_layernorm.weight = t.input_layernorm.weight
        mine.post_attention_layernorm.weight = t.post_attention_layernorm.weight
    model.norm.weight = inner.norm.weight


class Batcher:
    """Random batches of blocks: embeddings, positions, masks, labels and weights."""

    def __init__(self, cfg: DFlashConfig, embed, head_ids: list[int], gamma: float):
        import mlx.core as mx

        self.cfg = cfg
        self.embed = embed  # frozen target embedding table (V, H), float32
        lut = np.full(cfg.vocab_size, -1, dtype=np.int32)
        lut[np.asarray(head_ids)] = np.arange(len(head_ids), dtype=np.int32)
        self.lut = lut
        b = cfg.block_size
        self.pos_w = np.exp(-np.arange(b - 1) / gamma).astype(np.float32)
        self.mx = mx

    def make(self, seqs: list[Sequence], anchors: int, rng: random.Random, *,
             every: int | None = None):
        """``every``: all anchors at that stride (evaluation) instead of random ones."""
        mx = self.mx
        b = self.cfg.block_size
        chosen = []
        for s in seqs:
            # anchors: the last prompt token (the first round after prefill) and reply tokens
            lo, hi = max(s.prompt_len - 1, 0), len(s.tokens) - 2
            cand = list(range(lo, hi + 1))
            if every:
                picks = cand[::every][:anchors]
            else:
                picks = sorted(rng.sample(cand, min(anchors, len(cand)))) if cand else []
            chosen.append(picks)
        n = max(1, max(len(c) for c in chosen))
        t = max(len(s.tokens) for s in seqs)
        q = n * b
        S = len(seqs)
        feats = np.zeros((S, t, seqs[0].features.shape[1]), dtype=np.float16)
        tok = np.full((S, n, b), self.cfg.mask_token_id, dtype=np.int32)
        pos = np.zeros((S, n, b), dtype=np.int32)
        lab = np.zeros((S, n, b - 1), dtype=np.int32)
        wt = np.zeros((S, n, b - 1), dtype=np.float32)
        mask = np.zeros((S, 1, q, t + q), dtype=bool)
        for i, (s, picks) in enumerate(zip(seqs, chosen, strict=True)):
            T = len(s.tokens)
            feats[i, :T] = s.features
            for j, a in enumerate(picks):
                tok[i, j, 0] = s.tokens[a]
                pos[i, j] = np.arange(a, a + b)
                nxt = s.tokens[a + 1: a + b]
                ids = self.lut[nxt]
                lab[i, j, : len(nxt)] = np.maximum(ids, 0)
                wt[i, j, : len(nxt)] = self.pos_w[: len(nxt)] * (ids >= 0)
                rows = slice(j * b, (j + 1) * b)
                mask[i, 0, rows, :a] = True  # context strictly before the anchor
                mask[i, 0, rows, t + j * b: t + (j + 1) * b] = True
            for j in range(len(picks), n):  # padding blocks see their own block only
                mask[i, 0, j * b: (j + 1) * b, t + j * b: t + (j + 1) * b] = True
        emb = self.embed[mx.array(tok.reshape(S, q))]
        return (emb, mx.array(pos.reshape(S, q)), mx.array(feats), mx.array(mask),
                mx.array(lab), mx.array(wt))


def block_logits(model: DFlashModel, head_w, emb, pos, feats, mask):
    import mlx.core as mx

    b = model.config.block_size
    ctx = model.context(feats.astype(mx.float32))
    h = model.train_states(emb, pos, ctx, mask)
    S, q, H = h.shape
    h = h.reshape(S, q // b, b, H)[:, :, 1:]  # the masked positions
    return h @ head_w.T  # (S, n, b-1, Vh)


def loss_fn(model, head_w, emb, pos, feats, mask, lab, wt):
    import mlx.core as mx
    import mlx.nn as nn

    logits = block_logits(model, head_w, emb, pos, feats, mask)
    ce = nn.losses.cross_entropy(logits, lab, reduction="none")
    return (ce * wt).sum() / mx.maximum(wt.sum(), 1e-6)


def acceptance(model, head_w, batcher: Batcher, seqs: list[Sequence]) -> dict:
    """Held-out: per-position accuracy and the mean accepted run (leading correct
    predictions) per block, for the full block and for 3 proposals."""
    import mlx.core as mx

    rng = random.Random(0)
    correct_pos = np.zeros(batcher.cfg.block_size - 1)
    conf_pos = np.zeros(batcher.cfg.block_size - 1)
    runs_full, runs_3, n_blocks = 0.0, 0.0, 0
    for i in range(0, len(seqs), 4):
        part = seqs[i: i + 4]
        emb, pos, feats, mask, lab, wt = batcher.make(part, 64, rng, every=3)
        logits = block_logits(model, head_w, emb, pos, feats, mask)
        ok = (mx.argmax(logits, axis=-1) == lab) & (wt > 0)
        conf = np.array(mx.max(mx.softmax(logits, axis=-1), axis=-1))
        valid = np.array(wt[..., 0] > 0)
        ok = np.array(ok)
        conf_pos += conf[valid].sum(axis=0)
        lead = np.cumprod(ok, axis=-1)
        runs_full += float(lead.sum(axis=-1)[valid].sum())
        runs_3 += float(lead[..., :3].sum(axis=-1)[valid].sum())
        correct_pos += ok[valid].sum(axis=0)
        n_blocks += int(valid.sum())
    n = max(n_blocks, 1)
    return {"blocks": n_blocks, "accepted": runs_full / n, "accepted_k3": runs_3 / n,
            "pos_acc": [round(float(x) / n, 3) for x in correct_pos],
            "pos_conf": [round(float(x) / n, 3) for x in conf_pos]}


class Trainer:
    def __init__(self, workdir: Path, target, target_cfg: dict, head_ids: list[int],
                 recipe: Recipe, log):
        import mlx.core as mx
        import mlx.optimizers as optim

        from app.engine.models import dequantized_weight

        self.workdir = workdir
        self.log = log
        state_path = workdir / "state.json"
        self.state = json.loads(state_path.read_text()) if state_path.exists() else {}
        if self.state.get("recipe"):
            saved = dict(self.state["recipe"])
            saved["init_layers"] = tuple(saved["init_layers"])
            saved["minutes"] = recipe.minutes
            recipe = Recipe(**saved)
        self.recipe = recipe
        self.cfg = demo_config(target_cfg, recipe)
        self.target = target
        embed = dequantized_weight(target.model.embed_tokens).astype(mx.float32)
        self.head_w = embed[mx.array(head_ids)]
        self.batcher = Batcher(self.cfg, embed, head_ids, recipe.gamma)
        self.model = DFlashModel(self.cfg)
        ckpt = workdir / "latest.safetensors"
        if ckpt.exists():
            self.model.load_weights(str(ckpt))
            if not self.state:  # weights without a run state: an earlier recipe's checkpoint
                prev = workdir / "state.prev.json"
                self.state["warm_start"] = (json.loads(prev.read_text()) if prev.exists()
                                            else {"note": "weights of an earlier run"})
        else:
            init_from_target(self.model, target, recipe.init_layers)
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
        self.grad = __import__("mlx.nn", fromlist=["nn"]).value_and_grad(self.model, loss_fn)

    def lr(self, elapsed: float) -> float:
        r = self.recipe
        return cosine_lr(r.lr, r.warmup, r.minutes, self.state["step"], elapsed)

    def train(self, seqs: list[Sequence], seconds: float) -> float:
        import mlx.core as mx

        r = self.recipe
        start = time.monotonic()
        losses = []
        while time.monotonic() - start < seconds:
            batch = self.batcher.make(self.rng.sample(seqs, min(r.seqs, len(seqs))),
                                      r.anchors, self.rng)
            self.opt.learning_rate = self.lr(self.state["train_seconds"]
                                             + time.monotonic() - start)
            loss, grads = self.grad(self.model, self.head_w, *batch)
            self.opt.update(self.model, grads)
            mx.eval(loss, self.model.parameters(), self.opt.state)
            losses.append(float(loss))
            self.state["step"] += 1
        self.state["train_seconds"] += time.monotonic() - start
        return float(np.mean(losses)) if losses else float("nan")

    def evaluate(self, heldout: list[Sequence]) -> dict:
        return acceptance(self.model, self.head_w, self.batcher, heldout)

    def save(self, metrics: dict | None) -> None:
        save_run(self.workdir, self.model, self.opt, self.state,
                 metrics["accepted"] if metrics is not None else None)


def run(workdir: Path, teacher_dir: Path, recipe: Recipe, *, chunk_minutes: float = 8.0,
        feature_minutes: float = 4.0, heldout_n: int = 16, log=print) -> None:
    """The whole job: features, then alternate training chunks with new features, until
    ``recipe.minutes`` of training are done. Safe to stop and restart at any time."""
    from app.demo import teacher
    from app.demo.target import ensure_demo_target
    from app.engine.mlx_types import load_lm

    workdir.mkdir(parents=True, exist_ok=True)
    path = ensure_demo_target(log)
    target, _tok = load_lm(str(path))
    target_cfg = json.loads((path / "config.json").read_text())
    head_ids = demo_head_ids()
    (workdir / "draft_head.json").write_text(
        json.dumps({"format": 1, "token_ids": head_ids}, separators=(",", ":")) + "\n")
    tr = Trainer(workdir, target, target_cfg, head_ids, recipe, log)
    ids = tr.cfg.target_layer_ids
    log(f"dflash: layers {tr.cfg.num_hidden_layers}, block {tr.cfg.block_size}, "
        f"taps {list(ids)}, step {tr.state['step']}, "
        f"{tr.state['train_seconds'] / 60:.1f} of {recipe.minutes:.0f} min trained")
    train_store = FeatureStore(workdir / "features")
    held_store = FeatureStore(workdir / "heldout")
    held = teacher.load_heldout(teacher_dir)[:heldout_n]
    extract(target, held, held_store, ids, seconds=600, log=log)
    heldout = held_store.load()
    while tr.state["train_seconds"] < recipe.minutes * 60:
        extract(target, teacher.load_records(teacher_dir), train_store, ids,
                seconds=feature_minutes * 60, log=log)
        seqs = train_store.load()
        if not seqs:
            log("dflash: no teacher data yet; waiting")
            time.sleep(60)
            continue
        left = recipe.minutes * 60 - tr.state["train_seconds"]
        loss = tr.train(seqs, min(chunk_minutes * 60, left))
        m = tr.evaluate(heldout)
        point = {"step": tr.state["step"], "minutes": round(tr.state["train_seconds"] / 60, 1),
                 "tokens": sum(len(s.tokens) for s in seqs), "loss": round(loss, 4),
                 "accepted": round(m["accepted"], 3), "accepted_k3": round(m["accepted_k3"], 3),
                 "pos_acc": m["pos_acc"]}
        tr.state["curve"].append(point)
        tr.save(m)
        log(f"dflash: step {point['step']} ({point['minutes']} min, {point['tokens']} tokens) "
            f"loss {loss:.3f}; held-out accepted/block {m['accepted']:.3f} "
            f"(3 proposals {m['accepted_k3']:.3f}), per position {m['pos_acc']}")
    log("dflash: training done")


def demo_head_ids() -> list[int]:
    """The reduced head: the shipped demo draft's token list (chosen from teacher data)."""
    from app.resources import resource_path

    head = json.loads((resource_path("demo-draft") / "draft_head.json").read_text())
    return [int(t) for t in head["token_ids"]]
