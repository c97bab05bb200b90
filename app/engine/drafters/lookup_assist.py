"""Copying beside a model drafter: when the reply repeats text the context already holds
(a file being rewritten, a list quoted back, a name spelled again), prompt lookup proposes
the copy and the model drafter (MTP head, draft model, DFlash) is not asked that step.

A model drafter guesses one token at a time and rarely more than a few right in a row; a copy
found by an n-gram match is often right for several tokens. The lookup only speaks on a match
of at least ``NGRAM_MIN`` tokens and pauses after failed copies (``PromptLookupDrafter``'s own
policy), so on text that copies nothing it stays silent and the model drafter runs as alone.

Copy rounds are verified as what they are: deterministic proposals (greedy match at
temperature 0, sample-match above it, both exact), never with the model drafter's rejection
rule, and they are not evidence about the model drafter (the loop's width policy does not see
them; the model drafter observes their tokens as committed text, with the target's rows).
"""

from __future__ import annotations

from app.engine.drafters.base import Drafter
from app.engine.drafters.prompt_lookup import PromptLookupDrafter
from app.engine.events import SamplingParams
from app.engine.proposal import Proposal
from app.engine.verify import choose_rule

# measured on the demo's plain chat replies: a 2-token match guesses the next token 0.61 of
# the time (a 3-token match 0.74, but half as often), the MTP head 0.37
NGRAM_MIN = 2
NGRAM_MAX = 4
MAX_WIDTH = 7  # the prompt-lookup kind's default width


class LookupAssist:
    def __init__(self, max_width: int = MAX_WIDTH):
        self.lookup = PromptLookupDrafter(ngram_min=NGRAM_MIN, ngram_max=NGRAM_MAX)
        self.max_width = max_width
        self.rule = choose_rule(SamplingParams(), stochastic_draft=False)

    def begin(self, prompt: list[int], sampling: SamplingParams) -> None:
        self.lookup.begin(prompt, sampling)
        self.rule = choose_rule(sampling, stochastic_draft=False)

    def propose(self, committed: list[int], remaining: int) -> Proposal | None:
        """A copy of up to ``remaining`` tokens, or None (no match, or paused)."""
        k = min(self.max_width, remaining)
        if k <= 0:
            return None
        proposal = self.lookup.propose(committed, k)
        return proposal if proposal is not None and proposal.k > 0 else None

    def observe(self, committed: list[int], proposal: Proposal | None, accepted: int,
                new_tokens: list[int]) -> None:
        """Every step's committed tokens; ``proposal`` only when the step was a copy round
        (the loop counts copy rounds in its timings)."""
        self.lookup.observe(committed, proposal, accepted, new_tokens)


def for_drafter(drafter: Drafter | None, enabled: bool) -> LookupAssist | None:
    """The assist for a model drafter (None for prompt lookup itself, or when switched off)."""
    if not enabled or drafter is None or isinstance(drafter, PromptLookupDrafter):
        return None
    return LookupAssist()
