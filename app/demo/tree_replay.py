"""Trees vs chains on the same rounds, replayed: tokens per verify on flat hardware.

One greedy reply per prompt runs with chains, and every round's proposal and the drafter's
distribution behind it are logged. Greedy decoding's target token at each position is the
reply's own next token, so any tree built from a logged distribution can be walked offline
against the reply: the accepted path is exactly what a tree verify would have accepted there.
Every step is a round at the kind's full width (as on flat hardware, where a wide verify costs
what a narrow one does). Each round is replayed as its chain and as the tree the node budget
grows when a verify of up to ``--nodes`` tokens costs one step (a GPU's flat region): tokens
per verify are the accepted tokens + the target's own one, averaged over the same rounds.

    python -m app.demo.tree_replay --kinds mtp dflash --prompts 6 --max-tokens 64
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from app.engine.events import DoneEvent, GenerationRequest
from app.engine.proposal import Proposal


@dataclass
class Logged:
    start: int  # committed tokens when the round was proposed
    proposal: Proposal
    marginals: bool


@dataclass
class Tally:
    rounds: int = 0
    chain_tokens: int = 0
    tree_tokens: int = 0
    tree_nodes: list[int] = field(default_factory=list)
    chain_nodes: list[int] = field(default_factory=list)


def walk(proposal: Proposal, truth: list[int]) -> int:
    """Tokens a greedy verify accepts from ``proposal`` when the target's tokens are
    ``truth`` (the reply from the round's start)."""
    from app.engine.mlx_types import int_list
    from app.engine.tree import children

    toks = int_list(proposal.tokens)
    kids = children(proposal.parents) if proposal.parents is not None else {
        -1: [0] if toks else [], **{i: [i + 1] if i + 1 < len(toks) else []
                                    for i in range(len(toks))}}
    node, n = -1, 0
    while n < len(truth):
        nxt = next((c for c in kids[node] if toks[c] == truth[n]), None)
        if nxt is None:
            break
        node, n = nxt, n + 1
    return n


def replay(session: Any, kind: str, prompts: list[str], max_tokens: int,
           nodes: int) -> Tally:
    from app.demo.chat_prompts import chat_messages
    from app.engine import proposals, tree_build

    logged: list[Logged] = []
    real_next = proposals.ProposalSource.next

    def next_logged(self: Any, committed: list[int], remaining: int) -> Any:
        if self.drafter is not None:
            self.drafter.keep_dist = True
        pick = real_next(self, committed, remaining)
        if pick is not None and not pick.copied and pick.proposal.dist is not None:
            logged.append(Logged(len(committed), pick.proposal,
                                 bool(getattr(self.drafter, "marginals", False))))
        return pick

    budget = tree_build.NodeBudget(tree_build.flat_cost(nodes), max_nodes=nodes)
    tally = Tally()
    proposals.ProposalSource.next = next_logged  # type: ignore[method-assign]
    try:
        for prompt in prompts:
            logged.clear()
            req = GenerationRequest(messages=tuple(chat_messages(prompt)), draft_kind=kind,
                                    max_tokens=max_tokens, lookup_assist=False,
                                    allow_fallback=False, memory_interval_s=1e9,
                                    # no cut by this computer's costs (a block drafter's
                                    # confidence stop): on flat hardware whole rounds pay
                                    adaptive=False)
            done = [e for e in session.generate(req) if isinstance(e, DoneEvent)][-1]
            committed = list(session.encode(req)) + list(done.token_ids)
            for rec in logged:
                truth = committed[rec.start:]
                if len(truth) <= rec.proposal.k:
                    continue  # the reply ended inside the round: nothing to compare
                tree = budget.grow(rec.proposal, marginals=rec.marginals)
                tally.rounds += 1
                tally.chain_tokens += walk(rec.proposal, truth) + 1
                tally.tree_tokens += walk(tree, truth) + 1
                tally.tree_nodes.append(tree.k)
                tally.chain_nodes.append(rec.proposal.k)
    finally:
        proposals.ProposalSource.next = real_next  # type: ignore[method-assign]
    return tally


def main(argv: list[str] | None = None) -> None:
    from app.demo.builtins import register_demo_models
    from app.demo.chat_prompts import CHAT_PROMPTS
    from app.engine.session import Session

    register_demo_models()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="demo")
    ap.add_argument("--kinds", nargs="+", default=None,
                    help="draft kinds (default: every kind whose proposals grow trees)")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--nodes", type=int, default=64, help="verify size that costs one step")
    args = ap.parse_args(argv)
    from app import kinds

    wanted = args.kinds or [n for n in kinds.names() if kinds.get(n).grows_trees]
    from app.engine.width import FixedWidth

    s = Session(width_policy=FixedWidth)  # every step a round at the kind's full width
    s.load_target(args.model)
    for kind in wanted:
        t = replay(s, kind, list(CHAT_PROMPTS[: args.prompts]), args.max_tokens, args.nodes)
        if not t.rounds:
            print(f"{kind}: no rounds")
            continue
        mean_nodes = sum(t.tree_nodes) / len(t.tree_nodes)
        print(f"{kind}: {t.rounds} rounds; tokens per verify: chain "
              f"{t.chain_tokens / t.rounds:.3f}, tree {t.tree_tokens / t.rounds:.3f} "
              f"(x{t.tree_tokens / t.chain_tokens:.2f}); tree nodes mean {mean_nodes:.1f}")


if __name__ == "__main__":
    main()
