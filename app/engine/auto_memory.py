"""What the auto kind remembers between requests: per chat, and for the loaded pair as a whole.

A chat's evidence (``Memory.for_chat``, keyed by the request's conversation) is carried whole
from one request of the chat to the next, so a chat that copies a file keeps preferring copies
from its first round.

Beside it, the pair's history (``History``): every round any request of this pair ran, per
source, as slowly decayed per-depth counts (``HISTORY_DECAY`` per round: the last few hundred
rounds count). A request that starts a chat, or belongs to none, starts from that history
instead of the bare prior: its last rounds there weigh as ``HISTORY_WEIGHT`` rounds of the
request's own, and the rounds before them move its prior toward its rate on this pair
(enough to spare a request the rounds it would spend learning again that a drafter seldom
agrees with this target, little enough that a few rounds of its own overrule it).
The history is kept per way of sampling (greedy, or each temperature): a copy that is
right eight times in ten at temperature 0 is right far less often when the target samples at
0.7, and a record that mixed them would send a sampled request into rounds that do not pay.
A source's measured overhead is not carried: it is learnt from its own rounds, and one
carried from a request where a round met a pause would keep it from being chosen, so never
measured again. What every plain step takes beyond the target's pass (``host``: the
machine's, not a source's; per way of sampling, since drawing a token costs more than taking
the top one) is carried, so a request prices its first rounds with it. The history lives while
the pair is loaded (``Session`` makes a new ``Memory`` with each target and draft) and is kept
on disk between runs (``auto_record``): ``restore`` starts each source from what was kept for
its drafter, ``export`` gives what to keep, both under the drafters' own names
(``Session.drafter_key``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from app.engine.auto_costs import HostWork
from app.engine.auto_evidence import PRIOR_RATE, PRIOR_WEIGHT, RUNNER_PRIOR, Evidence
from app.engine.auto_record import split_key
from app.engine.events import SamplingParams

MEMORY_CHATS = 64  # chats whose evidence is kept
HISTORY_DECAY = 0.995  # weight of older rounds in the pair's history
HISTORY_WEIGHT = 3.0  # a request's start: its history counts as this many rounds of its own


@dataclass
class History:
    """The pair's record over every request: evidence per source."""

    evidence: dict[str, Evidence] = field(default_factory=dict)

    def record(self, source: str) -> Evidence:
        return self.evidence.setdefault(source, Evidence())

    def forget(self, source: str) -> None:
        """Drop ``source``'s record (another drafter of that kind was loaded), its copies'
        match classes included."""
        for key in [k for k in self.evidence if k == source or k.startswith(source + "#")]:
            del self.evidence[key]

    def observe(self, source: str, proposed: int, accepted: int) -> None:
        self.record(source).observe(proposed, accepted, decay=HISTORY_DECAY)

    def observe_miss(self, source: str, rank: int | None) -> None:
        self.record(source).observe_miss(rank, decay=HISTORY_DECAY)

    def start(self, source: str, prior: float = PRIOR_RATE) -> Evidence:
        """A request's starting evidence for ``source``: its history scaled to at most
        ``HISTORY_WEIGHT`` rounds, on a prior that the rest of the history moves from the bare
        ``prior`` toward its own rate (where it has none, the bare ``prior`` alone): a source the pair found weak is not hoped back to
        the bare guess at every request, and one that agrees is not pulled down to it.

        The record moves the starting rates but is not the request's own: the source keeps
        the optimism of a source the request has not tried (``Evidence.seen`` stays 0), and
        plain steps age the record's rounds like any. What a drafter did on one kind of task
        is a hint for the next, not a verdict: it ran where the copies had nothing, and which
        those places are changes with the task."""
        h = self.evidence.get(source)
        if h is None or h.rounds <= 0:
            return Evidence(prior=prior)
        scale = min(1.0, HISTORY_WEIGHT / h.rounds)
        # the bare prior is a guess made before anything ran: the record's rounds beyond the
        # few carried as counts move it (each round counted once, so a record of a few rounds
        # leaves the guess as it was and a long one replaces it)
        rest = h.rounds * (1.0 - scale)
        prior = (h.hits[0] * (1.0 - scale) + PRIOR_WEIGHT * prior) / (rest + PRIOR_WEIGHT)
        return Evidence(prior=prior, reached=[r * scale for r in h.reached],
                        hits=[n * scale for n in h.hits],
                        misses=h.misses * min(1.0, HISTORY_WEIGHT / max(h.misses, 1e-9)),
                        runner=[n * min(1.0, HISTORY_WEIGHT / max(h.misses, 1e-9))
                                for n in h.runner[: len(RUNNER_PRIOR)]])


class Memory:
    """Evidence per chat (the request's conversation), the most recent ``MEMORY_CHATS``, and
    the pair's ``history``."""

    def __init__(self, size: int = MEMORY_CHATS):
        self.size = size
        self._chats: OrderedDict[str, dict[str, Evidence]] = OrderedDict()
        self._histories: dict[str, History] = {}
        self._restored: set[str] = set()  # drafter keys whose kept record was read
        self._hosts: dict[str, HostWork] = {}  # a plain step's work beyond the target's pass

    @staticmethod
    def regime(sampling: SamplingParams) -> str:
        """How a request samples, as the pair's record tells them apart."""
        return "greedy" if sampling.greedy else f"temperature {sampling.temperature:.1f}"

    def host(self, sampling: SamplingParams) -> HostWork:
        """What a plain step of requests that sample as ``sampling`` does took beyond the
        target's pass, as last timed."""
        return self._hosts.setdefault(self.regime(sampling), HostWork())

    def history(self, sampling: SamplingParams) -> History:
        """The pair's record for requests that sample as ``sampling`` does."""
        return self._histories.setdefault(self.regime(sampling), History())

    def forget(self, source: str) -> None:
        """Drop ``source``'s record under every way of sampling (another drafter was loaded)."""
        for h in self._histories.values():
            h.forget(source)

    def unread(self, names: dict[str, str]) -> dict[str, str]:
        """Those of ``names`` (source -> drafter key) whose kept record was not read yet."""
        return {n: k for n, k in names.items() if k not in self._restored}

    def restore(self, kept: dict[str, dict[str, Evidence]], names: dict[str, str]) -> None:
        """Start each source of ``names`` (source -> its drafter's key) from ``kept`` (per way
        of sampling, evidence by drafter key), once per drafter: what this process has
        observed since is not overwritten."""
        for name, key in names.items():
            if key in self._restored:
                continue
            self._restored.add(key)
            for regime, sources in kept.items():
                evidence = self._histories.setdefault(regime, History()).evidence
                for stored, ev in sources.items():
                    source, cls = split_key(stored)
                    if source == key:
                        evidence.setdefault(name + cls, ev)

    def export(self, names: dict[str, str]) -> dict[str, dict[str, Evidence]]:
        """The pair's record of the sources of ``names``, per way of sampling, by drafter key."""
        out: dict[str, dict[str, Evidence]] = {}
        for regime, h in self._histories.items():
            for stored, ev in h.evidence.items():
                source, cls = split_key(stored)
                if source in names and ev.rounds > 0:
                    out.setdefault(regime, {})[names[source] + cls] = ev
        return out

    def for_chat(self, conversation: str | None) -> dict[str, Evidence]:
        """The chat's evidence (a fresh dict for a request outside any chat)."""
        if conversation is None:
            return {}
        chat = self._chats.pop(conversation, None)
        if chat is None:
            chat = {}
        self._chats[conversation] = chat
        while len(self._chats) > self.size:
            self._chats.popitem(last=False)
        return chat
