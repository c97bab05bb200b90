"""What the auto kind knows of each proposal source: per-depth acceptance as decayed counts.

``Evidence`` holds one source's rounds: ``a_j``, how often its ``j``-th proposal of a round is
accepted when the ones before it were, as decayed counts on a prior, and (for sources that grow
trees) the rank of the target's token among the drafter's runner-ups where a proposal was
rejected. A round of ``k`` proposals then commits ``expected_tokens(rates, k)`` on average.
A copy's evidence is also kept per class of its match (``copy_key``): a copy after a long match
(the text before it agrees with the text before its source for many tokens: a file being
rewritten) is right far more often than one after a two-token match (a common phrase); a
match counts back no further than the reply's start, and one that runs well into the prompt's
text (a chat template's turn opening that matches an earlier turn's) is a class of its own
(``copy_match``): whether a reply opens as the last one did is the pair's habit in chats.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PRIOR_RATE = 0.6  # a source's first proposal's acceptance before any is observed
PRIOR_WEIGHT = 2.0  # in observed rounds (one missed round does not condemn a source)
DECAY = 0.9  # weight of older rounds of the same source
PLAIN_DECAY = 0.97  # every plain step ages every source's recent evidence
LONG_DECAY = 0.98  # weight of older rounds in a source's long-run rate (plain steps keep it)
# how far a copy's match runs back says how often it is right: copies are also judged per
# class of their match, each with its own evidence. Measured on the bench suite's plain
# replies (prompt lookup asked at every position, first token right): matches of 2-3 tokens
# 0.48-0.54, 4-7 0.71-0.88, 8-15 0.75-0.93, 16 or more 0.86-0.99. The first class holds
# copies whose match is the prompt's text alone (the reply has not begun repeating).
COPY_CLASSES = (1, 3, 7, 15)
# a match that runs this far into the prompt's text is the prompt's own repetition (a chat's
# turn opening: "<|im_end|>\n<|im_start|>assistant\n" is 5 tokens), not a separator the reply's
# first tokens happen to share with the text they copy
PROMPT_RUN = 3
PROMPT_TEXT = -1  # ``copy_match`` of such a copy
# after a rejected proposal: how often the target's token is the drafter's 1st/2nd/3rd
# runner-up there, before any is observed
RUNNER_PRIOR = (0.15, 0.07, 0.04)


@dataclass
class Evidence:
    """One source's decayed per-depth counts: rounds that reached depth ``j``, and hits; and
    its long-run first-proposal counts (``seen``, ``seen_hits``), which plain steps do not age:
    recent evidence that ages drifts back toward what the source did over the whole reply,
    not toward the prior's guess (the prior weighs only until it has done anything)."""

    prior: float = PRIOR_RATE
    reached: list[float] = field(default_factory=list)
    hits: list[float] = field(default_factory=list)
    seen: float = 0.0
    seen_hits: float = 0.0
    misses: float = 0.0  # decayed rejections whose runner-ups were looked at
    runner: list[float] = field(default_factory=list)  # of those: the target's token's rank

    @property
    def rounds(self) -> float:
        """Decayed count of this source's recent rounds (how much recent evidence there is)."""
        return self.reached[0] if self.reached else 0.0

    @property
    def anchor(self) -> float:
        """The first proposal's prior: the prior moved by the long-run rounds that the recent
        counts no longer hold (those aged or decayed out of them), so a round is not counted
        twice and what ages out of the recent evidence is still remembered."""
        seen = max(0.0, self.seen - self.rounds)
        hits = min(max(0.0, self.seen_hits - (self.hits[0] if self.hits else 0.0)), seen)
        return (hits + PRIOR_WEIGHT * self.prior) / (seen + PRIOR_WEIGHT)

    def rates(self, n: int, bonus: float = 0.0) -> list[float]:
        """Acceptance of the first ``n`` proposals, each given the ones before it; the first
        depth's prior is the long-run rate, a later depth's the rate of the depth before it
        (a later proposal is never assumed better). ``bonus``: added to each rate (optimism
        while evidence is thin)."""
        if bonus:
            return [min(r + bonus, 0.999) for r in self.rates(n)]
        out, prior = [], self.anchor
        for j in range(n):
            reached = self.reached[j] if j < len(self.reached) else 0.0
            hits = self.hits[j] if j < len(self.hits) else 0.0
            prior = (hits + PRIOR_WEIGHT * prior) / (reached + PRIOR_WEIGHT)
            out.append(min(prior, 0.999))
        return out

    def observe(self, proposed: int, accepted: int, decay: float = DECAY) -> None:
        depth = min(accepted + 1, proposed)
        while len(self.reached) < proposed:
            self.reached.append(0.0)
            self.hits.append(0.0)
        for j in range(depth):
            self.reached[j] = decay * self.reached[j] + 1
            self.hits[j] = decay * self.hits[j] + (1 if j < accepted else 0)
        if proposed > 0:
            self.seen = LONG_DECAY * self.seen + 1
            self.seen_hits = LONG_DECAY * self.seen_hits + (1 if accepted > 0 else 0)

    def runner_rates(self) -> list[float]:
        """Given a rejected proposal: the chance the target's token was the drafter's
        runner-up of each rank (first, second, third)."""
        return [((self.runner[r] if r < len(self.runner) else 0.0) + PRIOR_WEIGHT * prior)
                / (self.misses + PRIOR_WEIGHT) for r, prior in enumerate(RUNNER_PRIOR)]

    def observe_miss(self, rank: int | None, decay: float = DECAY) -> None:
        """A rejected proposal: the target's token was runner-up ``rank`` (0: the first) or
        none of them (None)."""
        self.runner = [decay * (self.runner[r] if r < len(self.runner) else 0.0)
                       + (1.0 if r == rank else 0.0) for r in range(len(RUNNER_PRIOR))]
        self.misses = decay * self.misses + 1

    def age(self, decay: float = PLAIN_DECAY) -> None:
        self.reached = [r * decay for r in self.reached]
        self.hits = [h * decay for h in self.hits]
        self.misses *= decay
        self.runner = [h * decay for h in self.runner]


def copy_match(match: int, reply: int) -> int:
    """A copy's match as its evidence counts it: the tokens before it that agree with the
    text before its source (``match``), counted back no further than the reply's start
    (``reply`` tokens so far): the prompt's own text matching an earlier part of the prompt
    says nothing of whether this reply repeats. A match that runs ``PROMPT_RUN`` tokens or
    more into the prompt (a chat's turn opening matching an earlier turn's: a copy of the
    earlier reply's opening) is its own class (``PROMPT_TEXT``): whether such copies are right
    is a habit of the pair's conversations, not of copies that follow the reply's own text."""
    if match - reply >= PROMPT_RUN:
        return PROMPT_TEXT
    return max(0, min(match, reply))


def copy_key(source: str, matched: int) -> str:
    """The evidence key of ``source``'s copies after a match of ``matched`` tokens (its
    class)."""
    if matched == PROMPT_TEXT:
        return f"{source}#prompt"
    cls = next((i for i, top in enumerate(COPY_CLASSES) if matched <= top), len(COPY_CLASSES))
    return f"{source}#{cls}"


def expected_tokens(rates: list[float], k: int) -> float:
    """Tokens a round of ``k`` proposals commits on average (the target's own one included)."""
    tokens, reach = 1.0, 1.0
    for r in rates[:k]:
        reach *= r
        tokens += reach
    return tokens
