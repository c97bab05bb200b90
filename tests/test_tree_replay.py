"""The offline replay of trees against chains: a greedy walk accepts what a tree verify
would, and every replayed round is the drafter's whole proposal (a block drafter does not cut
its block by this computer's costs, since the replay prices verifies as flat hardware)."""

from __future__ import annotations

from tests.demo_gate import needs_demo


def _demo_ready() -> bool:
    from app.demo.target import demo_target_ready
    from app.engine.drafters.dflash import DEMO_FOLDER
    from app.resources import resource_path

    return demo_target_ready() and (resource_path(DEMO_FOLDER) / "config.json").is_file()


def test_walk_follows_the_branch_the_reply_took():
    import mlx.core as mx

    from app.demo.tree_replay import walk
    from app.engine.proposal import Proposal

    chain = Proposal(tokens=mx.array([5, 6, 7], dtype=mx.uint32))
    assert walk(chain, [5, 6, 9, 1]) == 2
    assert walk(chain, [4, 6, 7, 1]) == 0
    assert walk(chain, [5, 6, 7]) == 3
    # root 5 -> 6 -> 7 with a runner-up 8 beside 6 (its child 9)
    tree = Proposal(tokens=mx.array([5, 6, 7, 8, 9], dtype=mx.uint32),
                    parents=(-1, 0, 1, 0, 3), spine=3)
    assert walk(tree, [5, 8, 9, 2]) == 3
    assert walk(tree, [5, 6, 7, 2]) == 3
    assert walk(tree, [5, 8, 3]) == 2


@needs_demo(_demo_ready(), "The demo target or the shipped DFlash drafter")
def test_block_drafter_rounds_are_whole_blocks():
    from app.demo.chat_prompts import CHAT_PROMPTS
    from app.demo.tree_replay import replay
    from app.engine.session import Session
    from app.engine.width import FixedWidth

    s = Session(width_policy=FixedWidth)
    s.load_target("demo")
    tally = replay(s, "dflash", [CHAT_PROMPTS[0]], 24, 64)
    block = s.assets["dflash"].config.block_size
    assert tally.rounds > 3
    # whole blocks, but for the last rounds, cut by the tokens the reply had left
    whole = tally.chain_nodes[: -(block - 2)]
    assert whole and set(whole) == {block - 1}, tally.chain_nodes
    # trees hold the chain and more, and never accept less than it
    assert all(t >= c for t, c in zip(tally.tree_nodes, tally.chain_nodes, strict=True))
    assert tally.tree_tokens >= tally.chain_tokens
