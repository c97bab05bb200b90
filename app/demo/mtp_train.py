"""Training the demo target's MTP head (``draftpair demo mtp-train``).

The head is the Qwen3.5-style module of ``app/engine/drafters/mtp_head.py`` with the demo
target's layer kind (llama): its decoder layer starts as a copy of the target's last layer,
its final norm as the target's; the embedding and the output layer are the target's own,
frozen (the output layer reduced to the 8k most frequent target tokens, ``draft_head.json``).
It learns from the target's own states over the teacher replies (``features.py``): at
position ``i`` it reads ``t_{i+1}`` and the target's post-norm state ``h_i`` and is trained
to predict ``t_{i+2}`` — the target's own greedy token there — with the target's top-k
probabilities as soft labels. Loss on reply positions only. With ``chain_weight > 0`` it also
learns its chained proposal (``t_{i+3}`` from ``t_{i+2}`` and its own output state, exactly as
the decode loop chains, ``mtp_chain.py``), weighted so.

A new run can start from a shipped head (``init_from``: its weights and its output-token
list) instead of the target's last layer, so training goes on where an earlier machine left
it; ``run.json`` records that.

Resumable from ``WORKDIR`` (``mtp/ckpt``: weights, optimizer, step; ``mtp/best``: the best
held-out checkpoint; ``mtp/curve.jsonl``; ``train.log``). Between chunks of training it
extracts the states of teacher replies written since (the teacher job may still run).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from app.demo import teacher
from app.demo.features import FeatureStore, teacher_items
from app.demo.mtp_chain import two_step
from app.demo.mtp_data import batches, collate, make_examples
from app.demo.self_requests import is_self_key as is_chat
from app.demo.train.init_draft import choose_head
from app.demo.train.workdir import Logger
from app.engine.drafters.mtp_head import (
    POSTNORM,
    PRENORM,
    MTPHead,
    MTPModule,
    inner_model,
    new_layer_like,
)
from app.engine.mlx_types import load_arrays
from app.errors import DraftPairError
from app.fileio import atomic_write_json

HEAD_SIZE = 8192


@dataclass
class MTPTrainConfig:
    lr: float = 1e-3
    min_lr_frac: float = 0.05
    warmup_steps: int = 40
    weight_decay: float = 0.01
    batch_tokens: int = 1024  # small steps: many more updates for the same compute
    max_len: int = 512
    train_minutes: float = 60.0
    checkpoint_minutes: float = 4.0
    eval_minutes: float = 4.0
    soft_weight: float = 1.0
    chain_weight: float = 0.0  # weight of the chained (second) proposal's loss
    chat_weight: float = 1.0  # times per epoch a reply to a self-sampled request is seen
    hidden_state: str = POSTNORM
    head_size: int = HEAD_SIZE
    seed: int = 0


def init_demo_module(target) -> MTPModule:
    """A head whose layer and final norm start as the target's last layer and norm."""
    inner = inner_model(target)
    args = target.args
    hidden = args.hidden_size
    module = MTPModule(new_layer_like(target), hidden, args.rms_norm_eps)
    module.layers[0].update(inner.layers[-1].parameters())
    module.norm.weight = mx.array(inner.norm.weight)
    # fc starts as "pass the (normed) state through, plus a little of the token"
    eye = mx.eye(hidden)
    noise = mx.random.normal((hidden, 2 * hidden), key=mx.random.key(0)) * 0.01
    module.fc.weight = mx.concatenate([0.3 * eye, eye], axis=1) + noise
    mx.eval(module.parameters())
    return module


class MTPTrainer:
    def __init__(self, workdir: Path, teacher_dir: Path, target, tokenizer, log, *,
                 cfg: MTPTrainConfig | None = None, extend_to: float | None = None,
                 init_from: Path | None = None, new_head_ids: bool = False):
        self.workdir = workdir
        self.teacher_dir = teacher_dir
        self.target = target
        self.tok = tokenizer
        self.log = log
        self.dir = workdir / "mtp"
        self.ckpt, self.best = self.dir / "ckpt", self.dir / "best"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.store = FeatureStore(workdir)
        run_path = self.dir / "run.json"
        run = json.loads(run_path.read_text()) if run_path.exists() else {}
        self.cfg = MTPTrainConfig(**run["config"]) if run else (cfg or MTPTrainConfig())
        if run and cfg is not None and extend_to is not None:
            self.cfg.train_minutes = extend_to  # train further: a longer schedule
        self.vocab = int(target.args.vocab_size)
        head_file = self.dir / "draft_head.json"
        if init_from is not None and run:
            log(f"run: {self.dir} already holds a run; it resumes, --init-from is for new runs")
            init_from = None
        if init_from is not None:
            _check_head_folder(init_from)
            if not new_head_ids:
                shutil.copyfile(init_from / "draft_head.json", head_file)
        if not head_file.exists():
            recs = teacher.load_records(teacher_dir)
            always = sorted({int(t) for t in tokenizer.eos_token_ids}
                            | {int(t) for t in tokenizer.all_special_ids})
            ids = choose_head(recs, self.cfg.head_size, always, self.vocab)
            atomic_write_json(head_file, {"format": 1, "token_ids": ids})
        self.set_head(json.loads(head_file.read_text())["token_ids"])
        self.module = init_demo_module(target)
        if init_from is not None:
            weights = load_arrays(init_from / "model.safetensors")
            try:
                self.module.load_weights([(k, v.astype(mx.float32)) for k, v in weights.items()])
            except ValueError as exc:
                head_file.unlink(missing_ok=True)
                raise DraftPairError(f"The head in {init_from} does not fit the demo target's "
                                     "MTP module.", detail=str(exc)) from None
            mx.eval(self.module.parameters())
        import mlx.optimizers as optim

        self.opt = optim.AdamW(learning_rate=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        self.step = 0
        self.train_seconds = 0.0
        self.tokens_seen = 0
        self.best_score = -1.0
        if run:
            self._resume(run)
        else:
            atomic_write_json(run_path, {"config": asdict(self.cfg), "created": _now(),
                                         **({"init_from": {**_describe(init_from),
                                                           "new_head_ids": new_head_ids}}
                                            if init_from is not None else {})})
        self.heldout: list[dict] = []
        self.train: list[dict] = []
        self.soft: dict[str, dict] = {}

    def set_head(self, ids: list[int]) -> None:
        """The reduced output layer: these rows of the target's (tied) embedding, frozen."""
        self.head_ids = list(ids)
        self.lut = np.full(self.vocab, -1, dtype=np.int64)
        self.lut[np.array(self.head_ids)] = np.arange(len(self.head_ids))
        emb = inner_model(self.target).embed_tokens
        self.head_w = mx.array(emb.weight[mx.array(self.head_ids)])
        mx.eval(self.head_w)

    # -- data -------------------------------------------------------------------------
    def refresh_data(self, seconds: float | None = None) -> None:
        """Extract the states of new teacher replies (bounded time), then reload."""
        held, train = teacher_items(self.teacher_dir)
        # replies to self-sampled requests first: the scarce kind, worded as people chat
        train.sort(key=lambda item: not is_chat(item[0]))
        added = self.store.extract(self.target, held, log=self.log, max_len=self.cfg.max_len)
        added += self.store.extract(self.target, train, log=self.log, seconds=seconds,
                                    max_len=self.cfg.max_len)
        self.soft = {k: r for k, r in held + train}
        if added or not self.train:
            before = {e["key"] for e in self.heldout}
            self.heldout = self._examples(self.store.load("heldout"))
            if before and before != {e["key"] for e in self.heldout}:
                self._rescore_best()
            self.train = self._examples(self.store.load("train"))
            n_tok = sum(int(e["mask"].sum()) for e in self.train)
            self.log(f"data: {len(self.train)} records, {n_tok} trained positions; "
                     f"held-out {len(self.heldout)}")

    def _state(self, prenorm: mx.array, setting: str) -> mx.array:
        h = prenorm.astype(mx.float32)
        if setting == POSTNORM:
            h = inner_model(self.target).norm(h)
        return h

    def _examples(self, feats: list[dict]) -> list[dict]:
        return make_examples(feats, self.lut, self.soft, self.cfg.soft_weight)

    def _batches(self, examples: list[dict], rng: random.Random):
        for b in batches(examples, rng, batch_tokens=self.cfg.batch_tokens,
                         chat_weight=self.cfg.chat_weight):
            yield self._collate(b)

    def _collate(self, exs: list[dict], setting: str | None = None):
        return collate(exs, lambda h: self._state(h, setting or self.cfg.hidden_state))

    # -- model ------------------------------------------------------------------------
    def logits(self, module: MTPModule, x: mx.array, h: mx.array) -> mx.array:
        emb = inner_model(self.target).embed_tokens(x)
        _, post = module(emb, h)
        return post @ self.head_w.T

    def two_logits(self, module: MTPModule, x: mx.array, h: mx.array, x2: mx.array
                   ) -> tuple[mx.array, mx.array]:
        """Logits of the first and of the chained proposal at every position."""
        embed = inner_model(self.target).embed_tokens
        chain = MTPHead(module, self.cfg.hidden_state, "", "demo").chain_state
        post1, post2 = two_step(module, embed(x), h, embed(x2), chain)
        return post1 @ self.head_w.T, post2 @ self.head_w.T

    def _make_step(self):
        import mlx.optimizers as optim

        lam = self.cfg.soft_weight
        chain = self.cfg.chain_weight

        def ce(logits, y, m, si, sp):
            logits = logits.astype(mx.float32)
            lse = mx.logsumexp(logits, axis=-1)
            hard = lse - mx.take_along_axis(logits, y[..., None], axis=-1)[..., 0]
            soft = (sp * (lse[..., None] - mx.take_along_axis(logits, si, axis=-1))).sum(-1)
            return ((hard + lam * soft) * m).sum() / mx.maximum(m.sum(), 1.0)

        def loss_fn(module, x, h, y, m, si, sp, x2):
            if chain <= 0:
                return ce(self.logits(module, x, h), y, m, si, sp)
            first, second = self.two_logits(module, x, h, x2)
            # the chained proposal at row i predicts the first proposal's label of row i + 1
            nxt = [mx.pad(a[:, 1:], [(0, 0), (0, 1)] + [(0, 0)] * (a.ndim - 2))
                   for a in (y, m, si, sp)]
            return ce(first, y, m, si, sp) + chain * ce(second, *nxt)

        grad_fn = nn.value_and_grad(self.module, loss_fn)

        def step(x, h, y, m, si, sp, x2):
            # not mx.compile'd: with padded shapes changing every batch it re-traces
            loss, grads = grad_fn(self.module, x, h, y, m, si, sp, x2)
            grads, _ = optim.clip_grad_norm(grads, 1.0)
            self.opt.update(self.module, grads)
            return loss

        return step

    def lr_at(self) -> float:
        c = self.cfg
        if self.step < c.warmup_steps:
            return c.lr * (self.step + 1) / c.warmup_steps
        frac = min(1.0, self.train_seconds / max(c.train_minutes * 60, 1.0))
        return c.lr * (c.min_lr_frac + (1 - c.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))

    # -- evaluation -------------------------------------------------------------------
    def evaluate(self, module: MTPModule | None = None, setting: str | None = None) -> dict:
        """Held-out teacher-forced agreement of the head's first proposal with the target."""
        module = module or self.module
        groups = {g: {"ok": 0, "tot": 0, "both": 0} for g in ("generator", "chat")}
        loss_sum = 0.0
        head_ids = np.array(self.head_ids)
        for s in range(0, len(self.heldout), 8):
            exs = self.heldout[s : s + 8]
            X, H, Y, M, _, _, X2 = self._collate(exs, setting)
            logits, logits2 = self.two_logits(module, X, H, X2)
            logits = logits.astype(mx.float32)
            pred = mx.argmax(logits, axis=-1)
            pred2 = head_ids[np.array(mx.argmax(logits2, axis=-1))]
            lse = mx.logsumexp(logits, axis=-1)
            nll = lse - mx.take_along_axis(logits, Y[..., None], axis=-1)[..., 0]
            # agreement counts every reply position (labels outside the head are misses)
            full = np.zeros(M.shape, np.float32)
            ytok = np.zeros(M.shape, np.int64)
            for r, e in enumerate(exs):
                n = len(e["x"])
                full[r, e["start"]:n] = 1.0
                ytok[r, :n] = e["y_tok"]
            pred_tok = head_ids[np.array(pred)]
            hit = (pred_tok == ytok) * full
            # both proposals of a two-wide round accepted: the chained one at row i is the
            # token the first proposal of row i + 1 predicts
            both = np.zeros(M.shape, np.float32)
            both[:, :-1] = hit[:, :-1] * (pred2[:, :-1] == ytok[:, 1:]) * full[:, 1:]
            for r, e in enumerate(exs):
                g = groups["chat" if is_chat(e["key"]) else "generator"]
                g["ok"] += int(hit[r].sum())
                g["tot"] += int(full[r].sum())
                g["both"] += int(both[r].sum())
            loss_sum += float((nll * M).sum())
        ok, tot, both_n = (sum(g[k] for g in groups.values()) for k in ("ok", "tot", "both"))
        out = {"agreement": ok / max(tot, 1), "positions": tot,
               "both": both_n / max(tot, 1), "chained": both_n / max(ok, 1),
               "loss": loss_sum / max(tot, 1), "setting": setting or self.cfg.hidden_state}
        for name, g in groups.items():
            if g["tot"]:
                out[name] = {"agreement": g["ok"] / g["tot"], "both": g["both"] / g["tot"],
                             "positions": g["tot"]}
        return out

    @staticmethod
    def score(ev: dict) -> float:
        """Expected accepted proposals of a two-wide round, the two kinds of request weighed
        alike when the held-out set has both."""
        parts = [ev[g] for g in ("generator", "chat") if g in ev] or [ev]
        return sum(p["agreement"] + p["both"] for p in parts) / len(parts)

    def _rescore_best(self) -> None:
        """The held-out set changed: the best checkpoint's score is measured again on it, so
        later checkpoints are compared on the same prompts."""
        if not (self.best / "weights.safetensors").exists():
            return
        module = init_demo_module(self.target)
        module.load_weights(str(self.best / "weights.safetensors"))
        self.best_score = self.score(self.evaluate(module))
        self.log(f"data: held-out set changed; best checkpoint scored again: "
                 f"{self.best_score:.3f}")

    # -- checkpoints ------------------------------------------------------------------
    def _save_weights(self, folder: Path) -> None:
        from mlx.utils import tree_flatten

        folder.mkdir(parents=True, exist_ok=True)
        w = dict(tree_flatten(self.module.parameters()))
        mx.save_safetensors(str(folder / "weights.tmp.safetensors"), w)
        os.replace(folder / "weights.tmp.safetensors", folder / "weights.safetensors")

    def save_checkpoint(self) -> None:
        from mlx.utils import tree_flatten

        self._save_weights(self.ckpt)
        st = dict(tree_flatten(self.opt.state))
        mx.save_safetensors(str(self.ckpt / "optimizer.tmp.safetensors"), st)
        os.replace(self.ckpt / "optimizer.tmp.safetensors", self.ckpt / "optimizer.safetensors")
        atomic_write_json(self.ckpt / "meta.json", {
            "step": self.step, "train_seconds": self.train_seconds,
            "tokens_seen": self.tokens_seen, "best_score": self.best_score, "time": _now()})

    def _resume(self, run: dict) -> None:
        from mlx.utils import tree_unflatten

        meta_path = self.ckpt / "meta.json"
        if not meta_path.exists():
            return
        meta = json.loads(meta_path.read_text())
        self.module.load_weights(str(self.ckpt / "weights.safetensors"))
        opt_state = load_arrays(self.ckpt / "optimizer.safetensors")
        self.opt.state = tree_unflatten(list(opt_state.items()))
        self.step, self.train_seconds = int(meta["step"]), float(meta["train_seconds"])
        self.tokens_seen, self.best_score = int(meta["tokens_seen"]), float(meta["best_score"])
        self.log(f"resume: step {self.step}, {self.train_seconds / 60:.1f} min trained")

    def _eval_and_log(self) -> None:
        ev = self.evaluate()
        score = self.score(ev)  # the best head for the loop
        best = score > self.best_score
        if best:
            self.best_score = score
            self._save_weights(self.best)
            atomic_write_json(self.best / "meta.json", {
                "step": self.step, "train_seconds": self.train_seconds,
                "tokens_seen": self.tokens_seen, "eval": ev,
                "train_records": len(self.train),
                "train_chat_records": sum(is_chat(e["key"]) for e in self.train),
                "time": _now()})
        row = {"step": self.step, "minutes": round(self.train_seconds / 60, 2),
               "tokens_seen": self.tokens_seen, "train_records": len(self.train),
               "agreement": round(ev["agreement"], 4), "chained": round(ev["chained"], 4),
               "loss": round(ev["loss"], 4),
               **({"agreement_chat": round(ev["chat"]["agreement"], 4)} if "chat" in ev else {}),
               "time": _now()}
        with open(self.dir / "curve.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        self.log(f"eval: step {self.step} train {self.train_seconds / 60:.1f} min seen "
                 f"{self.tokens_seen} tok | held-out first-proposal agreement "
                 f"{ev['agreement']:.3f} (n={ev['positions']}"
                 + (f"; chat {ev['chat']['agreement']:.3f}" if "chat" in ev else "")
                 + f"), chained {ev['chained']:.3f}, loss {ev['loss']:.3f}"
                 + (" [best]" if best else ""))

    # -- loop -------------------------------------------------------------------------
    def train_for(self, seconds: float) -> None:
        rng = random.Random(self.cfg.seed + self.step)
        step_fn = self._make_step()
        started = time.monotonic()
        last_ckpt = last_eval = started
        window_tok, window_t0, losses = 0, started, []
        if self.step == 0 and self.best_score < 0:
            self._eval_and_log()
        while time.monotonic() - started < seconds and not self.finished():
            epoch = self._batches(self.train, rng)
            first = next(epoch, None)
            if first is None:
                raise DraftPairError("No training positions: no teacher replies were read yet, "
                                     "or --chat-weight 0 leaves none.")
            for X, H, Y, M, SI, SP, X2 in itertools.chain([first], epoch):
                t0 = time.monotonic()
                self.opt.learning_rate = mx.array(self.lr_at())
                loss = step_fn(X, H, Y, M, SI, SP, X2)
                mx.eval(loss, self.module.parameters(), self.opt.state)
                self.train_seconds += time.monotonic() - t0
                self.step += 1
                n = int(M.sum().item())
                self.tokens_seen += n
                window_tok += n
                losses.append(float(loss.item()))
                now = time.monotonic()
                if self.step % 25 == 0:
                    self.log(f"train: step {self.step} loss {sum(losses) / len(losses):.3f} "
                             f"lr {self.lr_at():.2e} {window_tok / (now - window_t0):.0f} tok/s")
                    window_tok, window_t0, losses = 0, now, []
                if now - last_eval > self.cfg.eval_minutes * 60:
                    self._eval_and_log()
                    last_eval = time.monotonic()
                if now - last_ckpt > self.cfg.checkpoint_minutes * 60:
                    self.save_checkpoint()
                    last_ckpt = time.monotonic()
                if time.monotonic() - started > seconds or self.finished():
                    break
        self._eval_and_log()
        self.save_checkpoint()

    def finished(self) -> bool:
        return self.train_seconds >= self.cfg.train_minutes * 60


def _check_head_folder(head: Path) -> None:
    missing = [n for n in ("model.safetensors", "draft_head.json") if not (head / n).is_file()]
    if missing:
        raise DraftPairError(f"{head} is not an MTP head folder (it has no "
                             f"{' or '.join(missing)}).")


def _describe(head: Path) -> dict:
    """What a warm start came from: the head's folder and its own training record."""
    cfg = json.loads((head / "config.json").read_text()) if (head / "config.json").exists() \
        else {}
    return {"path": str(head), "step": cfg.get("step"), "eval": cfg.get("eval"),
            "trained_minutes": cfg.get("trained_minutes")}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def run(workdir: Path, teacher_dir: Path, *, minutes: float | None, train_minutes: float | None,
        chunk_minutes: float = 8.0, extract_minutes: float = 3.0, lr: float | None = None,
        setting: str = POSTNORM, chain_weight: float = 0.0, chat_weight: float = 1.0,
        batch_tokens: int | None = None, init_from: Path | None = None,
        new_head_ids: bool = False) -> None:
    """Alternate feature extraction (new teacher replies) and training until done/time."""
    from app.demo.target import ensure_demo_target
    from app.engine.mlx_types import load_lm

    workdir.mkdir(parents=True, exist_ok=True)
    log = Logger(workdir)
    if setting not in (PRENORM, POSTNORM):
        raise ValueError(setting)
    target, tok = load_lm(str(ensure_demo_target(log)))
    given: dict[str, Any] = {}  # the rest keep MTPTrainConfig's defaults
    if batch_tokens:
        given["batch_tokens"] = batch_tokens
    if lr:
        given["lr"] = lr
    cfg = MTPTrainConfig(train_minutes=train_minutes or 60.0, hidden_state=setting,
                         chain_weight=chain_weight, chat_weight=chat_weight, **given)
    tr = MTPTrainer(workdir, teacher_dir, target, tok, log, cfg=cfg, extend_to=train_minutes,
                    init_from=init_from, new_head_ids=new_head_ids)
    log(f"run: mtp head, teacher {teacher_dir}, config {asdict(tr.cfg)}")
    started = time.monotonic()
    while not tr.finished():
        left = None if minutes is None else minutes * 60 - (time.monotonic() - started)
        if left is not None and left <= 0:
            break
        tr.refresh_data(seconds=extract_minutes * 60)
        chunk = chunk_minutes * 60 if left is None else min(chunk_minutes * 60, left)
        tr.train_for(chunk)
    log(f"run: stopped at step {tr.step}, {tr.train_seconds / 60:.1f} min trained, "
        f"best held-out score {tr.best_score:.3f} (first-proposal agreement plus both of a "
        f"two-wide round accepted)")
