"""The trainer: draft, optimizer, batches, checkpoints and periodic held-out evaluation."""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.checkpoints.inspect import read_draft_head
from app.demo import teacher
from app.demo.batching import length_batches, round_up
from app.demo.train.init_draft import (
    DraftShape,
    build_draft,
    choose_head,
    copy_target_layers,
    draft_config,
    pca_embedding,
    quantize_roundtrip,
    special_ids,
)
from app.demo.train.teacher_forced import teacher_forced_eval
from app.demo.train.workdir import SOFT_K, Logger, load_target, target_config
from app.errors import DraftPairError
from app.fileio import atomic_write_json, commit_file


@dataclass
class TrainConfig:
    lr: float = 2e-3
    min_lr_frac: float = 0.1
    warmup_steps: int = 30
    weight_decay: float = 0.01
    batch_tokens: int = 2048
    max_len: int = 512
    train_minutes: float = 120.0  # planned training time (cosine lr over it)
    checkpoint_minutes: float = 5.0
    eval_minutes: float = 10.0
    seed: int = 0
    soft_weight: float = 1.0  # weight of the top-k soft-label term (0: hard labels only)


class Trainer:
    """Owns the draft, its optimizer, the data and the checkpoints of one workdir."""

    def __init__(self, workdir: Path, log: Logger, *, shape: DraftShape | None = None,
                 cfg: TrainConfig | None = None, target=None):
        import mlx.core as mx
        import mlx.optimizers as optim
        import numpy as np

        self.workdir = workdir
        self.log = log
        self.ckpt = workdir / "checkpoint"
        self.best = workdir / "best"
        meta_path = self.ckpt / "meta.json"
        self.meta = json.loads(meta_path.read_text()) if meta_path.is_file() else None
        run_path = workdir / "run.json"
        run = json.loads(run_path.read_text()) if run_path.is_file() else None
        if run:
            shape = DraftShape(**run["shape"])
            cfg = TrainConfig(**{**run["train"], **({} if cfg is None else
                                                    {"train_minutes": cfg.train_minutes})})
        self.shape = shape or DraftShape()
        self.cfg = cfg or TrainConfig()
        if target is None:
            self.target_path, tmodel, self.tok = load_target(log)
        else:
            self.target_path, tmodel, self.tok = target
        tcfg = target_config(self.target_path)
        self.config = draft_config(tcfg, self.shape)
        self.model = build_draft(self.config)

        # Head (reduced output vocabulary), fixed for the run.
        head, problem = read_draft_head(workdir)
        if problem:
            raise DraftPairError(f"{workdir}: {problem}")
        if head is None:
            records = teacher.load_records(workdir)
            head = choose_head(records, self.shape.head_size, special_ids(self.tok))
            atomic_write_json(workdir / "draft_head.json", {"format": 1, "token_ids": head})
        self.head = head
        vocab = self.config["vocab_size"]
        lut = np.full(vocab, -1, dtype=np.int32)
        lut[np.array(self.head)] = np.arange(len(self.head), dtype=np.int32)
        self.lut = lut
        self.head_arr = mx.array(np.array(self.head, dtype=np.int32))

        if self.meta:
            self.model.load_weights(str(self.ckpt / "model.safetensors"))
        elif self.shape.target_layers:
            copy_target_layers(self.model, tmodel, self.shape.target_layers)
            # Train against the embedding exactly as it will ship (quantized, frozen).
            emb = self.model.model.embed_tokens.weight
            self.model.model.embed_tokens.weight = quantize_roundtrip(
                emb, self.shape.embed_bits, self.shape.embed_group)
        else:
            emb = pca_embedding(tmodel.model.embed_tokens.weight, self.shape.hidden_size)
            self.model.model.embed_tokens.weight = emb
        if not self.meta:
            atomic_write_json(run_path, {"shape": asdict(self.shape), "train": asdict(self.cfg),
                                    "config": self.config})
        if self.shape.target_layers:
            self.model.model.embed_tokens.freeze()
        del tmodel
        mx.eval(self.model.parameters())
        from app.engine.mlx_types import flat_arrays, load_arrays

        n_params = sum(v.size for _, v in flat_arrays(self.model.parameters()))
        self.optimizer = optim.AdamW(learning_rate=self.cfg.lr,
                                     weight_decay=self.cfg.weight_decay)
        self.optimizer.init(self.model.trainable_parameters())
        if self.meta:
            from mlx.utils import tree_unflatten

            st = load_arrays(self.ckpt / "optimizer.safetensors")
            self.optimizer.state = tree_unflatten(list(st.items()))
            self.step = int(self.meta["step"])
            self.train_seconds = float(self.meta["train_seconds"])
            self.tokens_seen = int(self.meta["tokens_seen"])
            self.best_score = float(self.meta.get("best_score", -1.0))
            log(f"train: resumed at step {self.step}, {self.train_seconds / 60:.1f} min trained")
        else:
            self.step = 0
            self.train_seconds = 0.0
            self.tokens_seen = 0
            self.best_score = -1.0
        c = self.config
        origin = (f"target layers {self.shape.target_layers}" if self.shape.target_layers
                  else "from scratch")
        log(f"train: draft hidden {c['hidden_size']} x {c['num_hidden_layers']} layers, "
            f"{origin} ({n_params / 1e6:.2f}M params), head {len(self.head)}")
        self.heldout = teacher.load_heldout(workdir)
        self._step_fn: Any = None  # compiled on the first batch

    # -- data ---------------------------------------------------------------------------

    def _examples(self, records: list[dict]):
        """(inputs, targets-in-head, mask, soft ids, soft probs) numpy rows, unpadded."""
        import numpy as np

        K = SOFT_K
        out = []
        for r in records:
            ids = list(r["prompt_ids"]) + list(r["reply_ids"])
            ids = ids[: self.cfg.max_len + 1]
            if len(ids) < 2:
                continue
            p = len(r["prompt_ids"])
            x = np.array(ids[:-1], dtype=np.int32)
            y_tok = np.array(ids[1:], dtype=np.int32)
            y = self.lut[y_tok]
            m = np.zeros(len(x), dtype=np.float32)
            m[p - 1:] = 1.0
            m[y < 0] = 0.0
            y = np.maximum(y, 0)
            sid = np.zeros((len(x), K), dtype=np.int32)
            sp = np.zeros((len(x), K), dtype=np.float32)
            tk = r.get("topk_ids")
            if tk and self.cfg.soft_weight > 0:
                n = min(len(tk), len(x) - (p - 1))
                t_ids = np.array(tk[:n], dtype=np.int64)[:, :K]
                t_lp = np.array(r["topk_lp"][:n], dtype=np.float32)[:, :K]
                h = self.lut[t_ids]
                pr = np.exp(t_lp) * (h >= 0)
                tot = pr.sum(axis=1, keepdims=True)
                pr = np.where(tot > 0, pr / np.maximum(tot, 1e-9), 0.0)
                sid[p - 1:p - 1 + n, : t_ids.shape[1]] = np.maximum(h, 0)
                sp[p - 1:p - 1 + n, : t_ids.shape[1]] = pr
            out.append((x, y, m, y_tok, sid, sp))
        return out

    def _batches(self, examples, rng: random.Random):
        import numpy as np

        order = list(range(len(examples)))
        rng.shuffle(order)
        batches = length_batches(order, lambda i: len(examples[i][0]),
                                 batch_tokens=self.cfg.batch_tokens, multiple=32, rng=rng)
        for b in batches:
            L = round_up(max(len(examples[i][0]) for i in b), 32)
            X = np.zeros((len(b), L), dtype=np.int32)
            Y = np.zeros((len(b), L), dtype=np.int32)
            M = np.zeros((len(b), L), dtype=np.float32)
            SI = np.zeros((len(b), L, SOFT_K), dtype=np.int32)
            SP = np.zeros((len(b), L, SOFT_K), dtype=np.float32)
            for r, i in enumerate(b):
                x, y, m, _, sid, sp = examples[i]
                X[r, : len(x)] = x
                Y[r, : len(y)] = y
                M[r, : len(m)] = m
                SI[r, : len(x)] = sid
                SP[r, : len(x)] = sp
            yield X, Y, M, SI, SP

    # -- model --------------------------------------------------------------------------

    def head_logits(self, model, x):
        h = model.model(x)
        w = model.model.embed_tokens.weight[self.head_arr]
        return h @ w.T

    def _make_step(self):
        import mlx.core as mx
        import mlx.nn as nn
        import mlx.optimizers as optim

        lam = self.cfg.soft_weight

        def loss_fn(model, x, y, m, si, sp):
            logits = self.head_logits(model, x)
            lse = mx.logsumexp(logits, axis=-1)
            hard = lse - mx.take_along_axis(logits, y[..., None], axis=-1)[..., 0]
            soft = (sp * (lse[..., None] - mx.take_along_axis(logits, si, axis=-1))).sum(-1)
            return ((hard + lam * soft) * m).sum() / mx.maximum(m.sum(), 1.0)

        grad_fn = nn.value_and_grad(self.model, loss_fn)
        state = [self.model.state, self.optimizer.state]

        def step(x, y, m, si, sp):
            loss, grads = grad_fn(self.model, x, y, m, si, sp)
            grads, _ = optim.clip_grad_norm(grads, 1.0)
            self.optimizer.update(self.model, grads)
            return loss

        return mx.compile(step, inputs=state, outputs=state)

    def lr_at(self) -> float:
        c = self.cfg
        if self.step < c.warmup_steps:
            return c.lr * (self.step + 1) / c.warmup_steps
        frac = min(1.0, self.train_seconds / max(c.train_minutes * 60, 1.0))
        return c.lr * (c.min_lr_frac + (1 - c.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))

    # -- checkpoints ----------------------------------------------------------------------

    def _save_weights(self, folder: Path) -> None:
        import mlx.core as mx
        from mlx.utils import tree_flatten

        folder.mkdir(parents=True, exist_ok=True)
        w = dict(tree_flatten(self.model.parameters()))
        mx.save_safetensors(str(folder / "model.safetensors.tmp.safetensors"), w)
        commit_file(folder / "model.safetensors.tmp.safetensors", folder / "model.safetensors")

    def save_checkpoint(self) -> None:
        import mlx.core as mx
        from mlx.utils import tree_flatten

        self.ckpt.mkdir(parents=True, exist_ok=True)
        self._save_weights(self.ckpt)
        st = dict(tree_flatten(self.optimizer.state))
        mx.save_safetensors(str(self.ckpt / "optimizer.tmp.safetensors"), st)
        commit_file(self.ckpt / "optimizer.tmp.safetensors", self.ckpt / "optimizer.safetensors")
        atomic_write_json(self.ckpt / "meta.json", {
            "step": self.step, "train_seconds": self.train_seconds,
            "tokens_seen": self.tokens_seen, "best_score": self.best_score,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })

    # -- evaluation -----------------------------------------------------------------------

    def evaluate(self, k: int = 3) -> dict:
        return teacher_forced_eval(self.model, self.head_arr, self.heldout, k=k,
                                   max_len=self.cfg.max_len)

    def maybe_best(self, ev: dict) -> bool:
        score = ev["sim_accept_mean"]
        if score <= self.best_score:
            return False
        self.best_score = score
        self._save_weights(self.best)
        atomic_write_json(self.best / "meta.json", {
            "step": self.step, "train_seconds": self.train_seconds,
            "tokens_seen": self.tokens_seen, "eval": ev,
            "teacher": dict(zip(("replies", "tokens"), teacher.count_tokens(self.workdir),
                                strict=True)),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })
        return True

    def _log_eval(self, ev: dict, best: bool) -> None:
        n_rec, n_tok = teacher.count_tokens(self.workdir)
        self.log(
            f"eval: step {self.step} train {self.train_seconds / 60:.1f} min "
            f"teacher {n_tok} tok/{n_rec} replies seen {self.tokens_seen} tok | held-out "
            f"agree {ev['agreement']:.3f} sim k={ev['k']} accept/round "
            f"{ev['sim_accept_mean']:.3f} tok/round {ev['sim_tokens_per_round']:.3f}"
            + (" [best]" if best else "")
        )

    # -- loop -----------------------------------------------------------------------------

    def train_for(self, seconds: float) -> None:
        """Train for ``seconds`` of wall time (re-reading the shards first)."""
        import mlx.core as mx

        records = teacher.load_records(self.workdir)
        examples = self._examples(records)
        n_tok = sum(int(e[2].sum()) for e in examples)
        self.log(f"train: {len(examples)} sequences, {n_tok} reply tokens in head; "
                 f"chunk {seconds / 60:.1f} min")
        if self._step_fn is None:
            self._step_fn = self._make_step()
        rng = random.Random(f"{self.cfg.seed}:{self.step}")
        t0 = time.monotonic()
        last_ckpt = last_eval = last_log = t0
        losses: list[float] = []
        done = False
        while not done:
            for X, Y, M, SI, SP in self._batches(examples, rng):
                ts = time.monotonic()
                self.optimizer.learning_rate = mx.array(self.lr_at())
                loss = self._step_fn(mx.array(X), mx.array(Y), mx.array(M), mx.array(SI),
                                     mx.array(SP))
                mx.eval(loss, self.model.state, self.optimizer.state)
                now = time.monotonic()
                self.train_seconds += now - ts
                self.step += 1
                self.tokens_seen += int(X.size)
                losses.append(loss.item())
                if now - last_log > 60:
                    self.log(f"train: step {self.step} loss {sum(losses) / len(losses):.3f} "
                             f"lr {self.lr_at():.2e} {self.train_seconds / 60:.1f} min "
                             f"{self.tokens_seen} tok seen")
                    losses = []
                    last_log = now
                if now - last_eval > self.cfg.eval_minutes * 60:
                    ev = self.evaluate()
                    self._log_eval(ev, self.maybe_best(ev))
                    last_eval = time.monotonic()
                if now - last_ckpt > self.cfg.checkpoint_minutes * 60:
                    self.save_checkpoint()
                    last_ckpt = time.monotonic()
                if now - t0 > seconds or self.train_seconds > self.cfg.train_minutes * 60:
                    done = True
                    break
        if time.monotonic() - last_eval > 60:
            ev = self.evaluate()
            self._log_eval(ev, self.maybe_best(ev))
        self.save_checkpoint()

    def finished(self) -> bool:
        return self.train_seconds >= self.cfg.train_minutes * 60
