"""``draftpair demo train-eagle3|export-eagle3|compare-drafters``: the demo EAGLE-3 drafter.

train-eagle3      train it on the target's low / middle / high layer features over the
                  project's teacher replies, with training-time test (resumable)
export-eagle3     write the best checkpoint as the shipped drafter (resources/demo-eagle3)
compare-drafters  plain vs each demo drafter (and auto) on hand-written chat requests
"""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    tr = sub.add_parser("train-eagle3", help="train the demo EAGLE-3 drafter (resumable)")
    tr.add_argument("--workdir", type=Path, default=None,
                    help="training folder (default: <data dir>/demo-train-eagle3)")
    tr.add_argument("--teacher", type=Path, default=None,
                    help="teacher replies archive (default: training/demo-teacher.jsonl.xz)")
    tr.add_argument("--minutes", type=float, default=60.0,
                    help="planned total training time; the learning rate decays over it")
    tr.add_argument("--lr", type=float, default=1.5e-3, help="peak learning rate (new runs)")
    tr.add_argument("--depth", type=int, default=4,
                    help="training-time test steps (new runs)")
    tr.add_argument("--seqs", type=int, default=2, help="sequences per step (new runs)")
    tr.add_argument("--max-len", type=int, default=512,
                    help="tokens of each sequence a step reads (new runs)")
    tr.add_argument("--warmup", type=int, default=30,
                    help="learning-rate warm-up steps (new runs)")
    tr.add_argument("--feature-minutes", type=float, default=4.0,
                    help="minutes of new layer features read before each training chunk")
    tr.add_argument("--chunk-minutes", type=float, default=4.0,
                    help="minutes of training between held-out evaluations")
    tr.set_defaults(func=_train)

    ex = sub.add_parser("export-eagle3",
                        help="write the EAGLE-3 drafter to resources/demo-eagle3")
    ex.add_argument("--workdir", type=Path, default=None)
    ex.add_argument("--out", type=Path, default=None,
                    help="destination folder (default: resources/demo-eagle3)")
    ex.add_argument("--checkpoint", choices=["best", "latest"], default="best")
    ex.set_defaults(func=_export)

    cp = sub.add_parser("compare-drafters",
                        help="plain vs each demo drafter (and auto) on hand-written chat "
                             "requests, one sitting")
    cp.add_argument("--kinds", nargs="+", default=None,
                    help="draft kinds (default: every kind with a demo drafter, and auto)")
    cp.add_argument("--prompts", type=int, default=12, choices=range(1, 17), metavar="1-16",
                    help="how many of the hand-written chat requests (default 12)")
    cp.add_argument("--max-tokens", type=int, default=128)
    cp.add_argument("--temp", type=float, default=0.0, help="sampling temperature")
    cp.add_argument("--trees", nargs="+", choices=["off", "on", "flat"], default=["off"],
                    metavar="MODE",
                    help="trees of candidates for the drafters that grow them (as generate): "
                         "off, on, flat; several ('off on') measure each such drafter both "
                         "ways in one sitting")
    cp.add_argument("--json", type=Path, default=None, help="also write the figures here")
    cp.set_defaults(func=_compare)


def _workdir(args) -> Path:
    from app.resources import user_data_dir

    return (args.workdir or user_data_dir() / "demo-train-eagle3").expanduser().resolve()


def _train(args) -> int:
    from app.demo import eagle3_train
    from app.demo.teacher_archive import DEFAULT_ARCHIVE
    from app.demo.train.workdir import Logger

    work = _workdir(args)
    recipe = eagle3_train.Recipe(depth=args.depth, lr=args.lr, minutes=args.minutes,
                                 seqs=args.seqs, max_len=args.max_len, warmup=args.warmup)
    eagle3_train.run(work, Path(args.teacher or DEFAULT_ARCHIVE), recipe,
                     feature_minutes=args.feature_minutes, chunk_minutes=args.chunk_minutes,
                     log=Logger(work))
    return 0


def _export(args) -> int:
    from app.demo import eagle3_export
    from app.engine.drafters.eagle3 import DEMO_FOLDER
    from app.resources import resource_path

    out = eagle3_export.export(_workdir(args), Path(args.out or resource_path(DEMO_FOLDER)),
                               which=args.checkpoint)
    print(f"exported EAGLE-3 drafter to {out}")
    return 0


def _compare(args) -> int:
    import json

    from app import kinds
    from app.demo import drafter_compare

    wanted = args.kinds or drafter_compare.default_kinds()
    names = []
    for w in wanted:
        try:
            names.append(kinds.normalize(w))
        except kinds.UnknownKind:
            print(f"draftpair: not a draft kind: {w} (the kinds: {', '.join(kinds.names())})")
            return 2
    out = drafter_compare.compare(names, prompts=args.prompts, max_tokens=args.max_tokens,
                                  temperature=args.temp, trees=tuple(args.trees))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    bad = [k for k, row in out["kinds"].items() if row["identical"] != out["prompts"]]
    if args.temp == 0 and bad:
        print(f"draftpair: at temperature 0 these differed from plain decoding: "
              f"{', '.join(bad)}")
        return 1
    return 0
