"""``draftpair generate``: one request through the engine, streamed to stdout or as JSON."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from app import kinds
from app.cli import kind_args

if TYPE_CHECKING:
    from app.engine.session import Session


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate text (speculative or plain)")
    p.add_argument("--model", default="demo", help="target: folder, store name or 'demo'")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", type=Path, help="read the prompt from a file ('-': stdin)")
    p.add_argument("--draft-model", help="draft folder, for the kinds that read one")
    p.add_argument("--draft-kind", default=None, choices=kind_args.choices(),
                   help=f"{kind_args.listing()} (default: the kind that reads --draft-model "
                   f"when it is given, else {kinds.OFF})")
    p.add_argument("--draft-block-size", type=int, default=None, dest="width",
                   help=f"proposals per round (default {kind_args.widths()})")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temp", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None,
                   help="with --temp > 0: the same seed gives the same reply, speculation on "
                        "or off (default: a new seed each time, reported with -v and --json)")
    p.add_argument("--independent-draws", dest="shared_draws", action="store_false",
                   help="with --temp > 0: draw the drafter's proposals independently of the "
                        "target's draws (checked by rejection sampling: a few more accepted, "
                        "but the reply then depends on the draft kind, not only the seed)")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--system", help="system prompt (chat)")
    chat = p.add_mutually_exclusive_group()
    chat.add_argument("--chat", dest="chat", action="store_true", default=True,
                      help="apply the model's chat template (default)")
    chat.add_argument("--raw", dest="chat", action="store_false",
                      help="feed the prompt as plain text")
    p.add_argument("--ngram-min", type=int, default=2)
    p.add_argument("--ngram-max", type=int, default=3)
    p.add_argument("--no-adaptive", dest="adaptive", action="store_false")
    p.add_argument("--no-lookup-assist", dest="lookup_assist", action="store_false",
                   help="model drafters: do not let prompt lookup propose copies of the "
                        "context beside them")
    p.add_argument("--trees", choices=["off", "on", "flat"], default="off",
                   help="trees of candidates (a model drafter's runner-up tokens, earlier "
                        "replies' other continuations): 'on' where "
                        "this computer's verify costs say they pay, 'flat' as if a verify of "
                        "up to 64 tokens cost one step (a measurement); with --kind auto, "
                        "'on' lets auto choose a tree over a chain where it pays more, 'flat' "
                        "prices auto's every choice so, 'off' keeps its drafters to chains")
    p.add_argument("--no-fallback", dest="allow_fallback", action="store_false",
                   help="fail instead of decoding plainly when speculation cannot run")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.add_argument("--verbose", "-v", action="store_true", help="print timings to stderr")
    p.set_defaults(func=run)


def _read_prompt(args: argparse.Namespace) -> str:
    from app.cli import EXIT_USAGE, CliError

    if args.prompt is not None:
        return args.prompt
    if args.prompt_file is not None:
        if str(args.prompt_file) == "-":
            return sys.stdin.read()
        from app.engine.validation import text_problem
        from app.errors import user_message

        try:
            data = args.prompt_file.read_bytes()
        except OSError as exc:
            raise CliError(f"The prompt file cannot be read: {user_message(exc)}",
                           EXIT_USAGE) from None
        problem = text_problem(data, f"The prompt file {args.prompt_file}")
        if problem:
            raise CliError(problem, EXIT_USAGE)
        return data.decode("utf-8")
    raise CliError("give --prompt TEXT or --prompt-file FILE", EXIT_USAGE)


def run(args: argparse.Namespace) -> int:
    from app.cli import EXIT_USAGE, CliError

    submitted = time.perf_counter()  # time to first token counts from here: loading included
    kind = args.draft_kind or (kind_args.folder_kind(args.draft_model) if args.draft_model
                               else kinds.OFF)
    plugin = kinds.get(kind)
    if args.draft_model and not plugin.needs_draft_folder:
        raise CliError(f"--draft-kind {kind} uses no draft model; leave --draft-model out",
                       EXIT_USAGE)
    if args.width is not None and not 1 <= args.width <= 64:
        raise CliError("--draft-block-size must be between 1 and 64", EXIT_USAGE)
    if not 1 <= args.ngram_min <= args.ngram_max <= 16:
        raise CliError("n-gram sizes must satisfy 1 <= --ngram-min <= --ngram-max <= 16",
                       EXIT_USAGE)
    prompt = _read_prompt(args)

    from app.engine.events import (
        GenerationRequest,
        SamplingParams,
    )
    from app.engine.session import Session
    from app.engine.validation import problems
    from app.errors import DraftPairError

    request = GenerationRequest(
        prompt=prompt,
        chat=args.chat,
        system_prompt=args.system,
        draft_kind=kind,
        draft_width=args.width,
        sampling=SamplingParams(
            temperature=args.temp, top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
            repetition_penalty=args.repetition_penalty, seed=args.seed,
            shared_draws=args.shared_draws,
        ),
        max_tokens=args.max_tokens,
        stop=tuple(args.stop),
        allow_fallback=args.allow_fallback,
        ngram_min=args.ngram_min,
        ngram_max=args.ngram_max,
        adaptive=args.adaptive,
        lookup_assist=args.lookup_assist,
        trees=args.trees,
        submitted_at=submitted,
    )
    found = problems(request)  # before anything heavy is loaded
    if found:
        raise CliError("; ".join(found)[:1].upper() + "; ".join(found)[1:] + ".", EXIT_USAGE)
    session = Session()
    try:
        session.load_target(args.model)
        draft = args.draft_model
        if draft is None and str(args.model) == "demo" and plugin.demo_draft:
            draft = plugin.demo_draft
        if plugin.needs_draft_folder and draft is not None:
            session.load_draft(draft)  # a DFlash folder or a small model
    except DraftPairError as exc:
        raise CliError(str(exc), detail=exc.detail) from None
    from app.cli import EXIT_INTERRUPTED
    from app.cli.interrupt import stop_on_ctrl_c

    cancel = threading.Event()
    with stop_on_ctrl_c(cancel):
        done = _stream(session, request, args, cancel)
    if cancel.is_set():  # Ctrl+C: the reply stopped within one prompt chunk or round
        if args.json:
            print(json.dumps(done.to_dict(), indent=2))
        else:
            sys.stdout.write("\n")
        return EXIT_INTERRUPTED
    if done.finish_reason == "error":
        raise CliError(done.error or "The generation failed.")
    if args.json:
        print(json.dumps(done.to_dict(), indent=2))
    else:
        _summary(session, done, args)
    return 0


def _stream(session: Session, request, args: argparse.Namespace, cancel: threading.Event):
    """Prints the reply as it streams; the DoneEvent."""
    from app.engine.events import DoneEvent, NoticeEvent, PrefillEvent, StatusEvent, TokenEvent

    done, told = None, False
    for ev in session.generate(request, cancel=cancel):
        if isinstance(ev, TokenEvent) and not args.json:
            sys.stdout.write(ev.text)
            sys.stdout.flush()
        elif isinstance(ev, PrefillEvent) and args.verbose:
            _progress(ev)
        elif isinstance(ev, StatusEvent) and ev.stage == "warmup":
            if args.verbose:
                _line(ev.message, done=ev.progress in (None, 1.0))
            elif not told:  # a wait of seconds is never silent; -v shows its progress
                told = True
                print(f"draftpair: note: {ev.message.split(' (')[0]}.", file=sys.stderr)
        elif isinstance(ev, NoticeEvent):
            print(f"draftpair: note: {ev.message}", file=sys.stderr)
        elif isinstance(ev, DoneEvent):
            done = ev
    assert done is not None
    return done


def _summary(session: Session, done, args: argparse.Namespace) -> None:
    """The newline after the reply, and with -v the figures on stderr."""
    sys.stdout.write("\n")
    if not args.verbose:
        return
    t = done.timings
    print(
        f"[{t.draft_kind}] {t.predicted_n} tokens, {t.predicted_per_second:.1f} tok/s, "
        f"prompt {t.prompt_n} tok in {t.prompt_ms:.0f} ms"
        f"{f' ({t.cache_n} reused)' if t.cache_n else ''}, accepted "
        f"{t.draft_n_accepted}/{t.draft_n}, mean accepted {t.accept_len_mean:.2f}, "
        f"tokens/verify {t.tokens_per_verify:.2f}, finish {done.finish_reason}"
        + (f", seed {t.seed} (--seed {t.seed} gives this reply again)"
           if t.seed is not None else ""),
        file=sys.stderr,
    )
    if t.tree_rounds:
        print(f"[{t.draft_kind}] {t.tree_rounds} of {t.draft_rounds} rounds verified as trees, "
              f"accepted path {t.tree_depth_mean:.2f} deep on average", file=sys.stderr)
    if t.warmup_ms:
        print(f"[{t.draft_kind}] measured this computer's speed for speculation in "
              f"{t.warmup_ms / 1e3:.1f} s before the first token (kept: not again)",
              file=sys.stderr)
    if t.copy_rounds and not t.sources:  # (auto's copies are in its shares below)
        print(f"[{t.draft_kind}] prompt lookup copied from the context in "
              f"{t.copy_rounds} of {t.draft_rounds} rounds, accepted "
              f"{t.copy_n_accepted}/{t.copy_n}", file=sys.stderr)
    if t.sources:
        from app.kinds.shares import detail_line, shares_line

        print(f"[{t.draft_kind}] {shares_line(t.sources)} ({detail_line(t.sources)})",
              file=sys.stderr)
    for name, why in t.sources_left_out.items():
        print(f"[{t.draft_kind}] left out {kinds.label(name)}: {why}", file=sys.stderr)
    drafter = _drafter_line(session, t.draft_kind)
    if drafter:
        print(f"[{t.draft_kind}] drafter: {drafter}", file=sys.stderr)


def _drafter_line(session: Session, kind: str) -> str | None:
    """Which drafter folder a kind that reads one used: its built-in name and note, or its path."""
    path = getattr(session.assets.get(kind), "path", None)
    if path is None:
        return None
    from app.checkpoints import builtins

    b = builtins.shipped_as(path)
    if b is None:
        return str(path)
    return f"{b.name} ({b.note})" if b.note else b.name


def _progress(ev) -> None:
    """Prompt-reading progress on stderr: one updating line on a terminal, else a line per step."""
    _line(f"reading the prompt: {ev.done:,}/{ev.total:,} tokens, {ev.tokens_per_s:,.0f} tok/s",
          done=ev.done >= ev.total)


def _line(line: str, *, done: bool) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"\r{line}\033[K" + ("\n" if done else ""))
    else:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
