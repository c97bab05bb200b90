"""Length-bucketed batches for the demo training pipelines (draft model and MTP head)."""

from __future__ import annotations

import random
from collections.abc import Callable


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def length_batches(order: list[int], length: Callable[[int], int], *, batch_tokens: int,
                   multiple: int, rng: random.Random, chunk: int = 256) -> list[list[int]]:
    """Indices of ``order`` grouped into batches of about ``batch_tokens`` padded tokens
    (lengths rounded up to ``multiple``): sorted by length within chunks of ``chunk`` to limit
    padding, the batches then shuffled with ``rng``."""
    out: list[list[int]] = []
    for s in range(0, len(order), chunk):
        cur: list[int] = []
        longest = 0
        for i in sorted(order[s : s + chunk], key=length):
            L = round_up(max(longest, length(i)), multiple)
            if cur and L * (len(cur) + 1) > batch_tokens:
                out.append(cur)
                cur, longest = [], 0
            cur.append(i)
            longest = max(longest, length(i))
        if cur:
            out.append(cur)
    rng.shuffle(out)
    return out
