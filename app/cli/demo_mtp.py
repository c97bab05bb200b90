"""``draftpair demo mtp-train|mtp-eval|mtp-export``: the demo target's MTP head.

mtp-train   train the head on the target's own states over teacher replies (resumable;
            reads the teacher data of ``demo train --phase generate``)
mtp-eval    held-out teacher-forced agreement of the head's first proposal, under both
            hidden-state settings (pre/post final norm); with --engine, real speedups
mtp-export  write the best checkpoint as the shipped head (resources/demo-mtp)
"""

from __future__ import annotations

from pathlib import Path


def register(sub, workdir_arg) -> None:
    tr = sub.add_parser("mtp-train", help="train the demo target's MTP head (resumable)")
    workdir_arg(tr)
    _teacher_arg(tr)
    tr.add_argument("--minutes", type=float, default=None,
                    help="stop this run after so many minutes (default: until done)")
    tr.add_argument("--train-minutes", type=float, default=None,
                    help="planned total training time, the learning rate decays over it "
                         "(new runs: 60; an existing run keeps its plan unless given)")
    tr.add_argument("--lr", type=float, default=None, help="peak learning rate (new runs)")
    tr.add_argument("--extract-minutes", type=float, default=3.0,
                    help="at most this long extracting new teacher replies between chunks")
    tr.add_argument("--chunk-minutes", type=float, default=8.0,
                    help="train so long between two rounds of extraction")
    tr.add_argument("--batch-tokens", type=int, default=None,
                    help="padded tokens per training step (new runs; default 1024)")
    tr.add_argument("--init-from", type=Path, default=None,
                    help="start a new run from this head folder's weights (e.g. the shipped "
                         "resources/demo-mtp) instead of the target's last layer")
    tr.add_argument("--chain-weight", type=float, default=0.0,
                    help="also learn the chained second proposal, its loss weighted so "
                         "(new runs; 0: the first proposal only)")
    tr.add_argument("--chat-weight", type=float, default=1.0,
                    help="times per epoch a reply to a request the target sampled itself "
                         "(demo teacher-self) is trained on (new runs)")
    tr.add_argument("--new-head-ids", action="store_true",
                    help="with --init-from: choose the output rows from this run's teacher "
                         "data instead of keeping the warm start's")
    tr.add_argument("--hidden-state", choices=["postnorm", "prenorm"], default="postnorm",
                    help="target state the head reads (new runs)")
    tr.set_defaults(func=_train)

    ev = sub.add_parser("mtp-eval", help="held-out agreement of an MTP head")
    workdir_arg(ev)
    _teacher_arg(ev)
    ev.add_argument("--head", type=Path, default=None,
                    help="head folder (default: the best checkpoint of the run in --workdir)")
    ev.add_argument("--engine", action="store_true",
                    help="also run the engine on held-out prompts: plain vs auto vs mtp vs full-model")
    ev.add_argument("--prompts", type=_positive, default=16)
    ev.add_argument("--prompt-set", choices=["chat", "heldout"], default="chat",
                    help="chat: hand-written chat requests, none from the training generator "
                         "(default); heldout: the generator's held-out prompts")
    ev.add_argument("--max-tokens", type=int, default=128)
    ev.add_argument("--no-lookup-assist", dest="lookup_assist", action="store_false",
                    help="the drafters alone, without prompt lookup copying the context "
                         "beside them")
    ev.add_argument("--json", action="store_true")
    ev.set_defaults(func=_eval)

    ex = sub.add_parser("mtp-export", help="write the best MTP checkpoint to resources/demo-mtp")
    workdir_arg(ex)
    ex.add_argument("--out", type=Path, default=None)
    ex.add_argument("--checkpoint", choices=["best", "latest"], default="best")
    ex.set_defaults(func=_export)


def _positive(text: str) -> int:
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return n


def _teacher_arg(p) -> None:
    p.add_argument("--teacher", type=Path, default=None,
                   help="teacher data folder (default: the --workdir of demo train)")


def _dirs(args) -> tuple[Path, Path]:
    from app.demo.mtp_paths import default_mtp_workdir, default_teacher_dir

    work = (args.workdir or default_mtp_workdir()).expanduser().resolve()
    tdir = getattr(args, "teacher", None) or default_teacher_dir()
    return work, Path(tdir).expanduser().resolve()


def _train(args) -> int:
    from app.cli import CliError
    from app.demo import mtp_train

    if args.chat_weight < 0:
        raise CliError("--chat-weight cannot be negative")
    if args.new_head_ids and args.init_from is None:
        raise CliError("--new-head-ids goes with --init-from (a new run chooses its rows anyway)")

    work, tdir = _dirs(args)
    mtp_train.run(work, tdir, minutes=args.minutes, train_minutes=args.train_minutes,
                  lr=args.lr, setting=args.hidden_state, extract_minutes=args.extract_minutes,
                  chunk_minutes=args.chunk_minutes, chain_weight=args.chain_weight,
                  chat_weight=args.chat_weight, batch_tokens=args.batch_tokens,
                  init_from=args.init_from, new_head_ids=args.new_head_ids)
    return 0


def _eval(args) -> int:
    from app.demo import mtp_eval

    work, tdir = _dirs(args)
    mtp_eval.main(work, tdir, args)
    return 0


def _export(args) -> int:
    from app.demo import mtp_export
    from app.resources import resource_path

    work, _ = _dirs(args)
    out = args.out or resource_path("demo-mtp")
    path = mtp_export.export(work, Path(out), which=args.checkpoint)
    print(f"exported MTP head to {path}")
    return 0
