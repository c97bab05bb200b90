"""What auto speculation did in one reply, in words: "MTP head 58% of rounds, copies 27%,
plain 15%", from ``Timings.sources`` (per source: rounds, drafted, accepted, rounds verified
as trees; "plain": the plain steps)."""

from __future__ import annotations

from collections.abc import Mapping

from app.kinds.registry import find

PLAIN = "plain"  # the key of the plain steps in ``Timings.sources``


def word(source: str) -> str:
    """A source's short name (its plugin's ``share_word``, else its label)."""
    if source == PLAIN:
        return PLAIN
    p = find(source)
    if p is None:
        return source
    return p.share_word or p.label


def shares(sources: Mapping[str, Mapping[str, int]]) -> list[tuple[str, float]]:
    """(source, share of the steps) for every source that took a step, largest first."""
    total = sum(int(v.get("rounds", 0)) for v in sources.values())
    if total <= 0:
        return []
    out = [(name, int(v.get("rounds", 0)) / total) for name, v in sources.items()
           if int(v.get("rounds", 0)) > 0]
    return sorted(out, key=lambda kv: -kv[1])


def shares_line(sources: Mapping[str, Mapping[str, int]]) -> str:
    """"MTP head 58% of rounds, copies 27%, plain 15%" ("" when nothing was counted)."""
    parts = shares(sources)
    if not parts:
        return ""
    words = [f"{word(n)} {share:.0%}" for n, share in parts]
    words[0] += " of rounds"
    return ", ".join(words)


def detail_line(sources: Mapping[str, Mapping[str, int]]) -> str:
    """Per source: rounds, accepted of drafted ("MTP head 12 rounds, 20/31 accepted; ...")."""
    rows = []
    for name, v in sources.items():
        if name == PLAIN:
            rows.append(f"plain {int(v.get('rounds', 0))} steps")
        else:
            trees = int(v.get("trees", 0))
            rows.append(f"{word(name)} {int(v.get('rounds', 0))} rounds"
                        + (f" ({trees} as trees)" if trees else "")
                        + f", {int(v.get('accepted', 0))}/{int(v.get('drafted', 0))} accepted")
    return "; ".join(rows)
