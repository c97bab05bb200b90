"""Distillation pipeline for the demo draft (``draftpair demo train``); see ``pipeline``.

Modules, one phase each: ``workdir`` (the run's folder, log and target), ``init_draft`` (shape,
initialisation, reduced head), ``trainer``, ``teacher_forced`` (held-out evaluation),
``ship`` (export: the shipped folder), ``card`` (its model card), ``status``, ``pipeline`` (the
phases and ``run``). The public names stay importable from ``app.demo.train``.
"""

from app.demo.train.card import model_card
from app.demo.train.init_draft import (
    DraftShape,
    build_draft,
    choose_head,
    copy_target_layers,
    draft_config,
    pca_embedding,
    quantize_roundtrip,
)
from app.demo.train.pipeline import phase_generate, phase_train, run, run_all
from app.demo.train.ship import TOKENIZER_FILES, export, ship_weights
from app.demo.train.status import status_lines
from app.demo.train.teacher_forced import teacher_forced_eval
from app.demo.train.trainer import TrainConfig, Trainer
from app.demo.train.workdir import (
    DEFAULT_HEAD_SIZE,
    N_HELDOUT,
    SOFT_K,
    Logger,
    default_workdir,
    load_target,
)

__all__ = [
    "DEFAULT_HEAD_SIZE",
    "N_HELDOUT",
    "SOFT_K",
    "TOKENIZER_FILES",
    "DraftShape",
    "Logger",
    "TrainConfig",
    "Trainer",
    "build_draft",
    "choose_head",
    "copy_target_layers",
    "default_workdir",
    "draft_config",
    "export",
    "load_target",
    "model_card",
    "pca_embedding",
    "phase_generate",
    "phase_train",
    "quantize_roundtrip",
    "run",
    "run_all",
    "ship_weights",
    "status_lines",
    "teacher_forced_eval",
]
