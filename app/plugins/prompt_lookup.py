"""Prompt lookup: copies what followed the last few tokens earlier in the prompt or reply."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.kinds import KindPlugin

if TYPE_CHECKING:
    from app.checkpoints.inspect import CheckpointInfo
    from app.engine.drafter_context import DrafterContext
    from app.engine.drafters.base import Drafter


class PromptLookup(KindPlugin):
    name = "prompt-lookup"
    label = "Prompt lookup"
    share_word = "copies"
    explanation = ("Guesses the next words by copying what followed the same words "
                   "earlier in the chat; best when the reply repeats the text.")
    technical = "prompt lookup (n-gram match of the last tokens against prompt + output)"
    default_width = 7
    aliases = ("prompt_lookup", "ngram", "lookup")
    bench_goals = (("rewrite", "prompt lookup on rewrite tasks vs plain", "off", ("rewrite",), 4.0),
                   ("prose", "prompt lookup on prose vs plain", "off", ("prose",), 0.98))

    def offer(self, t: CheckpointInfo) -> str | None:
        return "Copies likely continuations from the prompt; best for edits and rewrites."

    def make(self, ctx: DrafterContext) -> Drafter:
        from app.engine.drafters import prompt_lookup

        return prompt_lookup.make(ctx)


PLUGIN = PromptLookup()
