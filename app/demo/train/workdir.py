"""Where a training run lives: its folder, its log, the target it distils from."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

DEFAULT_HEAD_SIZE = 8192
SOFT_K = 8  # teacher top-k log-probs kept per reply token (soft labels)
N_HELDOUT = 48


def default_workdir() -> Path:
    from app.resources import user_data_dir

    return user_data_dir() / "demo-train"


class Logger:
    def __init__(self, workdir: Path, echo: bool = True):
        workdir.mkdir(parents=True, exist_ok=True)
        self.path = workdir / "train.log"
        self.echo = echo

    def __call__(self, msg: str) -> None:
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} [{os.getpid()}] {msg}"
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        if self.echo:
            print(line, flush=True)


def load_target(progress=None):
    from app.demo.target import ensure_demo_target
    from app.engine.mlx_types import load_lm

    path = ensure_demo_target(progress)
    model, tok = load_lm(str(path))
    return path, model, tok


def target_config(target_path: Path) -> dict:
    return json.loads((target_path / "config.json").read_text())
