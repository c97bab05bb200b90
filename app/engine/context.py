"""The model's context length, a check before any work, and the trim policy for chats.

``context_length(config)`` reads the limit a checkpoint declares (``max_position_embeddings``
and its older names, in ``text_config`` for multimodal wrappers); ``sliding_window(config)``
says how far a sliding-window model attends (it still takes prompts up to the context
length). ``check`` refuses a prompt that does not fit with a plain sentence; ``Admission`` is what
``Session.admit`` hands every caller (generate, the server, the bench): the prompt's token ids
and the limit they were checked against, so all of them agree on both; ``fit_messages``
applies the user's policy for chats: ``"refuse"`` (the default) or ``"drop-oldest"``, which
leaves out the oldest turns, keeps the system prompt and always keeps the latest message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.errors import DraftPairError

POLICIES = ("refuse", "drop-oldest")
POLICY_LABELS = {"refuse": "Refuse prompts that do not fit",
                 "drop-oldest": "Drop the oldest turns (keep the system prompt)"}
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
               "max_sequence_length", "n_ctx")


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def context_length(config: dict[str, Any], tokenizer_max: int | None = None) -> int | None:
    """Tokens the model takes (prompt + reply), None when the checkpoint does not say."""
    for cfg in (_text_config(config), config):
        for key in LENGTH_KEYS:
            value = cfg.get(key)
            if isinstance(value, int) and value > 0:
                return value
    # tokenizers write a huge sentinel (1e30) when they do not know
    if tokenizer_max and 0 < tokenizer_max < 10**8:
        return int(tokenizer_max)
    return None


def sliding_window(config: dict[str, Any]) -> int | None:
    cfg = _text_config(config)
    value = cfg.get("sliding_window") or cfg.get("attention_window_size")
    return int(value) if isinstance(value, int) and value > 0 else None


@dataclass(frozen=True)
class ContextUse:
    used: int  # prompt tokens
    limit: int | None
    reply_room: int | None  # tokens left for the reply (None: no known limit)
    dropped_turns: int = 0


@dataclass(frozen=True)
class Admission:
    """A prompt the model takes: its token ids and the context limit they were checked against."""

    tokens: tuple[int, ...]
    limit: int | None  # tokens the model reads, prompt and reply together (None: unknown)
    dropped_turns: int = 0  # oldest chat turns left out to fit (the drop-oldest policy)

    @property
    def reply_room(self) -> int | None:
        """Tokens left for the reply (None: no known limit)."""
        return None if self.limit is None else self.limit - len(self.tokens)


def check(n_prompt: int, limit: int | None, *, dropped: int = 0) -> ContextUse:
    """Refuse a prompt that leaves no room for a reply, before any model work."""
    if limit is not None and n_prompt >= limit:
        raise DraftPairError(
            f"The prompt is {n_prompt:,} tokens but the model reads at most {limit:,} "
            "(prompt and reply together). Shorten it, start a new chat, or choose "
            "“drop the oldest turns” in the Reply settings."
        )
    room = None if limit is None else limit - n_prompt
    return ContextUse(n_prompt, limit, room, dropped)


def fit_messages(
    messages: Sequence[dict[str, str]],
    encode: Callable[[list[dict[str, str]]], list[int]],
    limit: int | None,
    *,
    policy: str = "refuse",
    reserve: int = 1,
) -> tuple[list[int], int]:
    """Token ids of ``messages`` and how many turns were dropped to leave ``reserve`` tokens
    for the reply. ``drop-oldest`` removes the oldest non-system messages one at a time (the
    system prompt and the latest message stay); ``refuse`` raises with a plain sentence."""
    if policy not in POLICIES:
        raise DraftPairError(f"Unknown context policy {policy!r}; choose {' or '.join(POLICIES)}.")
    msgs = [dict(m) for m in messages]
    tokens = encode(msgs)
    budget = None if limit is None else max(1, limit - max(0, reserve))
    dropped = 0
    if budget is None or len(tokens) <= budget or policy == "refuse":
        check(len(tokens), limit)
        return tokens, 0
    while len(tokens) > budget:
        turns = [i for i, m in enumerate(msgs) if m.get("role") != "system"]
        if len(turns) <= 1:
            break  # only the latest message is left: nothing more to drop
        del msgs[turns[0]]
        dropped += 1
        # keep a user turn first after the system prompt (templates expect it)
        turns = [i for i, m in enumerate(msgs) if m.get("role") != "system"]
        if len(turns) > 1 and msgs[turns[0]].get("role") == "assistant":
            del msgs[turns[0]]
            dropped += 1
        tokens = encode(msgs)
    check(len(tokens), limit, dropped=dropped)
    return tokens, dropped
