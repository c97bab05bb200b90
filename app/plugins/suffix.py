"""Suffix decoding: copies what followed the same words in this request's text or in earlier
replies of the same chat (or, on the server, of the same API key)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.kinds import KindPlugin

if TYPE_CHECKING:
    from app.checkpoints.inspect import CheckpointInfo
    from app.engine.drafter_context import DrafterContext
    from app.engine.drafters.base import Drafter


class Suffix(KindPlugin):
    name = "suffix"
    shapes_trees = True  # the index's other continuations at branch points
    label = "Earlier replies"
    share_word = "earlier replies"
    explanation = ("Guesses the next words from what followed the same words in this chat "
                   "and in its earlier replies; best for repeated shapes: edited files, "
                   "tool calls, lists.")
    technical = ("suffix decoding (longest suffix match against this request's text and the "
                 "replies kept for this chat or API key)")
    default_width = 8
    keeps_replies = True
    aliases = ("suffix-decoding", "suffix_decoding")
    bench_goals = (("prose", "earlier replies on prose vs plain", "off", ("prose",), 0.98),)

    def offer(self, t: CheckpointInfo) -> str | None:
        return "Copies from this chat's earlier replies; best for repeated structures."

    def make(self, ctx: DrafterContext) -> Drafter:
        from app.engine.drafters.suffix import SuffixDrafter

        req = ctx.request
        memory = ctx.replies if req.reply_scope is not None else None
        seed: list[list[int]] = []
        if memory is not None and req.reply_scope is not None and req.messages:
            if memory.index(req.reply_scope) is None:  # first sight of this chat: its replies
                tok = ctx.target.tokenizer
                seed = [list(tok.encode(m["content"], add_special_tokens=False))
                        for m in req.messages if m.get("role") == "assistant"]
        return SuffixDrafter(memory=memory, scope=req.reply_scope, seed_replies=seed,
                             adaptive=req.adaptive)


PLUGIN = Suffix()
