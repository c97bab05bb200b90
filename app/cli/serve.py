"""``draftpair serve``: an OpenAI-compatible HTTP server on the loaded pair."""

from __future__ import annotations

import argparse
import sys

from app import kinds
from app.cli import kind_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="serve the model over an OpenAI-compatible HTTP API",
        description="Serve /v1/models, /v1/chat/completions and /v1/completions on the engine. "
        "One engine thread: requests queue (up to --max-queue waiting, then 429).")
    p.add_argument("--model", default="demo", help="target: folder, store name or 'demo'")
    p.add_argument("--draft", help="draft model folder (default for --model demo: the shipped "
                   "demo draft)")
    p.add_argument("--no-draft", action="store_true", help="load no draft model")
    p.add_argument("--draft-kind", choices=kind_args.choices(), default=None,
                   help="default draft kind of requests (default: the kind of the loaded "
                   f"draft, else {kinds.OFF}); a request may ask for another in its "
                   "'draftpair' field")
    p.add_argument("--draft-width", type=int, default=None,
                   help="default proposals per round (default: the kind's own)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' on /v1 (default: no key)")
    p.add_argument("--model-id", default=None, help="model id clients send (default: the "
                   "target's name)")
    p.add_argument("--max-queue", type=int, default=8,
                   help="requests that may wait behind the running one before 429 (default 8)")
    p.add_argument("--max-tokens-cap", type=int, default=4096,
                   help="the most tokens one request may ask for (default 4096)")
    p.add_argument("--max-body", type=int, default=1 << 20,
                   help="largest request body in bytes (default 1 MiB)")
    p.add_argument("--max-connections", type=int, default=None,
                   help="open client connections at most (default 1000, fewer if the "
                   "open-files limit is lower); at the limit the longest idle one is closed")
    p.add_argument("--client-timeout", type=float, default=20.0,
                   help="seconds a client has to send a request's headers, and again its "
                   "body, before the connection is closed (default 20)")
    p.add_argument("--suffix-memory-mb", type=float, default=64.0, metavar="MB",
                   help="memory for earlier replies that drafting from earlier replies "
                   "proposes from, kept per API key and conversation (default 64; 0 keeps none)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.cli import EXIT_USAGE, CliError

    if not 0 <= args.port <= 65535:
        raise CliError("--port must be between 0 and 65535", EXIT_USAGE)
    if args.draft_width is not None and not 1 <= args.draft_width <= 64:
        raise CliError("--draft-width must be between 1 and 64", EXIT_USAGE)
    if args.max_queue < 0 or args.max_tokens_cap < 1 or args.max_body < 1024:
        raise CliError("--max-queue must be >= 0, --max-tokens-cap >= 1 and --max-body >= 1024",
                       EXIT_USAGE)
    if args.max_connections is not None and args.max_connections < 1:
        raise CliError("--max-connections must be at least 1", EXIT_USAGE)
    if not 0.1 <= args.client_timeout <= 3600:
        raise CliError("--client-timeout must be between 0.1 and 3600 seconds", EXIT_USAGE)
    if not 0 <= args.suffix_memory_mb <= 65536:
        raise CliError("--suffix-memory-mb must be between 0 and 65536", EXIT_USAGE)
    if args.draft and args.no_draft:
        raise CliError("--draft and --no-draft contradict each other", EXIT_USAGE)

    from app.errors import DraftPairError
    from app.server.protocol import Limits
    from app.server.runner import LOOPBACK, ServerConfig, serve

    draft = None if args.no_draft else args.draft
    demo_kind = kinds.get(args.draft_kind) if args.draft_kind else kinds.for_folder({})
    if (draft is None and not args.no_draft and args.model == "demo" and demo_kind is not None
            and demo_kind.demo_draft):
        from app.resources import resource_path

        folder = resource_path(demo_kind.demo_draft)  # the kind's built-in draft for the demo
        if (folder / "config.json").is_file():
            draft = str(folder)
    config = ServerConfig(
        model=args.model, draft=draft, default_kind=args.draft_kind,
        default_width=args.draft_width, host=args.host, port=args.port, api_key=args.api_key,
        max_queue=args.max_queue, model_id=args.model_id,
        limits=Limits(max_body_bytes=args.max_body, max_tokens_cap=args.max_tokens_cap,
                      default_max_tokens=min(512, args.max_tokens_cap),
                      body_timeout_s=args.client_timeout),
        max_connections=args.max_connections, client_timeout_s=args.client_timeout,
        reply_memory_bytes=int(args.suffix_memory_mb * 2**20),
    )
    if args.host not in LOOPBACK:
        print(f"draftpair: note: listening on {args.host}: other machines can reach this "
              "server" + ("" if args.api_key else "; consider --api-key"), file=sys.stderr)
    print(f"draftpair: loading {args.model}…", file=sys.stderr, flush=True)

    def ready(handle: object) -> None:
        info = handle.engine.info  # type: ignore[attr-defined]
        draft_text = f", draft {info.draft}" if info.draft else ""
        print(f"draftpair: serving {info.id} ({info.default_kind}{draft_text}) at "
              f"{handle.url}/v1  (Ctrl+C stops)", file=sys.stderr, flush=True)  # type: ignore[attr-defined]

    try:
        serve(config, on_ready=ready)
    except DraftPairError as exc:
        raise CliError(str(exc)) from None
    return 0
