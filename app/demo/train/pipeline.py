"""The distillation pipeline for the demo draft (``draftpair demo train``).

Phases, all resumable from ``WORKDIR``:
  generate  greedy teacher replies of the demo target to varied prompts (``teacher.py``)
  train     a small llama draft on the teacher sequences, loss on reply tokens only and
            logits over a reduced head (top-N target tokens, ``draft_head.json``);
            checkpoints model + optimizer + step every few minutes
  eval      teacher-forced agreement and simulated k-token acceptance on held-out replies

``--phase all`` alternates generation and training in one process; the phases can also run as
two processes at once (``--phase generate`` and ``--phase train``): the trainer re-reads the
shards between chunks. Progress goes to ``WORKDIR/train.log`` with UTC timestamps.
"""

from __future__ import annotations

import time
from pathlib import Path

from app.demo import teacher
from app.demo.train.init_draft import DraftShape
from app.demo.train.trainer import TrainConfig, Trainer
from app.demo.train.workdir import N_HELDOUT, Logger, load_target
from app.errors import DraftPairError


def phase_generate(workdir: Path, *, minutes: float | None, batch: int, max_tokens: int,
                   log: Logger, target=None) -> None:
    if target is None:
        _, model, tok = load_target(log)
    else:
        model, tok = target
    gen = teacher.TeacherGenerator(workdir, model, tok, batch=batch, max_tokens=max_tokens,
                                   log=log)
    gen.generate_heldout(N_HELDOUT)
    n0, t0 = teacher.count_tokens(workdir)
    log(f"gen: start with {n0} replies / {t0} tokens on disk")
    t_start = time.monotonic()
    n, t = gen.generate(seconds=None if minutes is None else minutes * 60)
    dt = time.monotonic() - t_start
    log(f"gen: +{n} replies, +{t} tokens in {dt / 60:.1f} min "
        f"({t / max(dt, 1e-9):.1f} tok/s); total {n0 + n} replies / {t0 + t} tokens")


def phase_train(workdir: Path, args, log: Logger, target=None) -> None:
    shape, cfg = _shape_and_cfg(args)
    _wait_for_data(workdir, args.min_tokens, log)
    tr = Trainer(workdir, log, shape=shape, cfg=cfg, target=target)
    budget = (args.minutes * 60) if args.minutes else None
    t0 = time.monotonic()
    while not tr.finished():
        chunk = 10 * 60.0
        if budget is not None:
            chunk = min(chunk, budget - (time.monotonic() - t0))
            if chunk <= 0:
                break
        tr.train_for(chunk)
    log(f"train: stopped at step {tr.step}, {tr.train_seconds / 60:.1f} min trained")


def _shape_and_cfg(args) -> tuple[DraftShape, TrainConfig]:
    shape = DraftShape()
    if getattr(args, "hidden", None):
        shape.hidden_size = args.hidden
        shape.num_attention_heads = max(1, args.hidden // 64)
        shape.num_key_value_heads = shape.num_attention_heads
        shape.intermediate_size = args.hidden * 4
    if getattr(args, "layers", None):
        shape.num_hidden_layers = args.layers
    if getattr(args, "head_size", None):
        shape.head_size = args.head_size
    if getattr(args, "from_target_layers", None):
        try:
            shape.target_layers = [int(i) for i in str(args.from_target_layers).split(",")]
        except ValueError:
            raise DraftPairError("--from-target-layers takes target layer numbers, e.g. 0,1,2") \
                from None
    cfg = TrainConfig(train_minutes=getattr(args, "train_minutes", 120.0) or 120.0)
    if getattr(args, "lr", None):
        cfg.lr = args.lr
    return shape, cfg


def _wait_for_data(workdir: Path, min_tokens: int, log: Logger) -> None:
    while True:
        n, t = teacher.count_tokens(workdir)
        if t >= min_tokens:
            return
        log(f"train: waiting for teacher data ({t}/{min_tokens} tokens)")
        time.sleep(120)


def run_all(workdir: Path, args, log: Logger) -> None:
    """Generate until --min-tokens, then alternate training and generation chunks."""
    target = load_target(log)
    _, model, tok = target
    n, t = teacher.count_tokens(workdir)
    if t < args.min_tokens:
        gen = teacher.TeacherGenerator(workdir, model, tok, batch=args.batch,
                                       max_tokens=args.max_tokens, log=log)
        gen.generate_heldout(N_HELDOUT)
        while teacher.count_tokens(workdir)[1] < args.min_tokens:
            gen.generate(seconds=args.gen_chunk * 60)
    shape, cfg = _shape_and_cfg(args)
    tr = Trainer(workdir, log, shape=shape, cfg=cfg, target=target)
    gen = teacher.TeacherGenerator(workdir, model, tok, batch=args.batch,
                                   max_tokens=args.max_tokens, log=log)
    gen.generate_heldout(N_HELDOUT)
    tr.heldout = teacher.load_heldout(workdir)
    budget = (args.minutes * 60) if args.minutes else None
    t0 = time.monotonic()
    while not tr.finished():
        if budget is not None and time.monotonic() - t0 > budget:
            break
        tr.train_for(args.train_chunk * 60)
        if tr.finished():
            break
        n0, t0g = teacher.count_tokens(workdir)
        gn, gt = gen.generate(seconds=args.gen_chunk * 60)
        log(f"gen: +{gn} replies, +{gt} tokens; total {n0 + gn} replies / {t0g + gt} tokens")
    log(f"run: done at step {tr.step}, {tr.train_seconds / 60:.1f} min trained")


def run(workdir: Path, args) -> None:
    log = Logger(workdir)
    log(f"run: phase={args.phase} workdir={workdir}")
    if args.phase == "generate":
        phase_generate(workdir, minutes=args.minutes, batch=args.batch,
                       max_tokens=args.max_tokens, log=log)
        return
    if args.phase == "train":
        phase_train(workdir, args, log)
        return
    run_all(workdir, args, log)
