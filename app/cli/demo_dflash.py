"""``draftpair demo train-dflash|eval-dflash|export-dflash``: the demo DFlash drafter.

train-dflash   train it on the target's layer features over teacher replies (resumable;
               the teacher replies come from ``draftpair demo train --phase generate``)
eval-dflash    plain vs DFlash on held-out chat prompts (the engine, greedy, alternating)
export-dflash  write the best checkpoint as the shipped drafter (resources/demo-dflash)
"""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    tr = sub.add_parser("train-dflash", help="train the demo DFlash drafter (resumable)")
    tr.add_argument("--workdir", type=Path, default=None,
                    help="training folder (default: <data dir>/demo-train-dflash)")
    tr.add_argument("--teacher", type=Path, default=None,
                    help="teacher replies folder (default: <data dir>/demo-train)")
    tr.add_argument("--minutes", type=float, default=60.0,
                    help="planned total training time; the learning rate decays over it")
    tr.add_argument("--layers", type=int, default=1, help="drafter layers (new runs)")
    tr.add_argument("--block-size", type=int, default=8, help="block size (new runs)")
    tr.add_argument("--taps", type=int, default=4,
                    help="target layers read, evenly spaced from 1 to N-3 (new runs)")
    tr.add_argument("--lr", type=float, default=1.5e-3, help="peak learning rate (new runs)")
    tr.add_argument("--feature-minutes", type=float, default=4.0,
                    help="minutes of new layer features read before each training chunk")
    tr.set_defaults(func=_train)

    ev = sub.add_parser("eval-dflash", help="plain vs DFlash on held-out chat prompts")
    ev.add_argument("--drafter", type=Path, default=None,
                    help="DFlash drafter folder (default: the shipped demo drafter)")
    ev.add_argument("--prompts", type=int, default=12)
    ev.add_argument("--workdir", type=Path, default=None,
                    help="training folder whose checkpoint-selection prompts are left out")
    ev.add_argument("--max-tokens", type=int, default=128)
    ev.add_argument("--width", type=int, default=None, help="proposals per round")
    ev.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ev.set_defaults(func=_eval)

    ex = sub.add_parser("export-dflash", help="write the DFlash drafter to resources/demo-dflash")
    ex.add_argument("--workdir", type=Path, default=None)
    ex.add_argument("--out", type=Path, default=None,
                    help="destination folder (default: resources/demo-dflash)")
    ex.add_argument("--checkpoint", choices=["best", "latest"], default="best")
    ex.set_defaults(func=_export)


def _dirs(args) -> tuple[Path, Path]:
    from app.resources import user_data_dir

    work = (args.workdir or user_data_dir() / "demo-train-dflash").expanduser().resolve()
    teacher = getattr(args, "teacher", None) or user_data_dir() / "demo-train"
    return work, Path(teacher).expanduser().resolve()


def _train(args) -> int:
    from app.demo import dflash_train
    from app.demo.train.workdir import Logger

    work, teacher = _dirs(args)
    recipe = dflash_train.Recipe(layers=args.layers, init_layers=tuple(range(args.layers)),
                                 block_size=args.block_size,
                                 n_taps=args.taps, lr=args.lr, minutes=args.minutes)
    dflash_train.run(work, teacher, recipe, feature_minutes=args.feature_minutes,
                     log=Logger(work))
    return 0


def _eval(args) -> int:
    import json

    from app.demo import dflash_eval

    out = dflash_eval.compare(args.drafter, prompts=args.prompts,
                              exclude=dflash_eval.selection_ids(_dirs(args)[0]),
                              max_tokens=args.max_tokens, width=args.width)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if out["identical"] == out["prompts"] else 1


def _export(args) -> int:
    from app.demo import dflash_export
    from app.resources import resource_path

    work, _ = _dirs(args)
    out = dflash_export.export(work, Path(args.out or resource_path("demo-dflash")),
                               which=args.checkpoint)
    print(f"exported DFlash drafter to {out}")
    return 0
