"""What a remote reply reports: its own types, with every figure the endpoint may leave out
optional (``None`` = unknown, never 0).

``RemoteTimings`` holds what llama-server-style ``timings`` and OpenAI ``usage`` carry, and
what the client measures itself (time to first token, and a decode rate from the arrival times
when the server reports none; ``rate_source`` says which). A server that sends no ``timings``
has no draft counts, memory or verify passes: showing 0 would claim it drafted nothing.
``RemoteDone`` ends a remote stream as ``DoneEvent`` ends a local one; it carries the same
text, ids, finish reason and error, with ``RemoteTimings``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from app.engine.events import done_dict


@dataclass(frozen=True)
class RemoteTimings:
    # llama-server names, as for a local reply (app.engine.events.Timings)
    prompt_n: int | None = None
    cache_n: int | None = None
    prompt_ms: float | None = None
    prompt_per_second: float | None = None
    predicted_n: int | None = None
    predicted_ms: float | None = None
    predicted_per_second: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None
    draft_rounds: int | None = None
    copy_n: int | None = None
    copy_n_accepted: int | None = None
    copy_rounds: int | None = None
    accept_len_mean: float | None = None
    acceptance_rate: float | None = None
    tokens_per_verify: float | None = None
    verify_passes: int | None = None
    draft_ms: float | None = None
    verify_ms: float | None = None
    rollback_ms: float | None = None
    ttft_ms: float | None = None
    peak_memory_bytes: int | None = None
    draft_width: int | None = None
    draft_kind: str | None = None  # as the endpoint names it (a draftpair serve does)
    acceptance_rule: str | None = None
    fallback: str | None = None
    exact: bool | None = None
    # where the reply came from
    endpoint: str = ""  # host:port
    model: str = ""
    rate_source: str = "unknown"  # of predicted_per_second: "server" | "client" | "unknown"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_TEXT = ("draft_kind", "acceptance_rule", "fallback")
_SOURCE = ("endpoint", "model", "rate_source")
_NUMERIC = {f.name for f in fields(RemoteTimings)} - {*_TEXT, *_SOURCE, "exact"}


@dataclass(frozen=True)
class RemoteDone:
    """The end of a remote stream (also after cancellation or an error: never raised)."""

    text: str
    token_ids: tuple[int, ...]  # empty when the endpoint does not send ids
    finish_reason: str  # "stop" | "length" | "cancelled" | "error"
    timings: RemoteTimings
    error: str | None = None  # plain-language message when finish_reason == "error"

    def to_dict(self) -> dict[str, Any]:
        return done_dict(self)


def from_server(
    *,
    timings: dict[str, Any] | None,
    usage: dict[str, Any] | None,
    endpoint: str,
    model: str,
    ttft_ms: float | None,
    client_rate: float | None,
) -> RemoteTimings:
    values: dict[str, Any] = {}
    t = timings or {}
    for key, value in t.items():
        if key in _NUMERIC and isinstance(value, int | float) and not isinstance(value, bool):
            values[key] = value
    for key in _TEXT:
        if isinstance(t.get(key), str):
            values[key] = t[key]
    if isinstance(t.get("exact"), bool):
        values["exact"] = t["exact"]
    u = usage or {}
    if "prompt_n" not in values and isinstance(u.get("prompt_tokens"), int):
        values["prompt_n"] = u["prompt_tokens"]
    if "predicted_n" not in values and isinstance(u.get("completion_tokens"), int):
        values["predicted_n"] = u["completion_tokens"]
    if values.get("draft_n") and "draft_n_accepted" in values and "acceptance_rate" not in values:
        values["acceptance_rate"] = values["draft_n_accepted"] / values["draft_n"]
    source = "server" if "predicted_per_second" in values else "unknown"
    if source == "unknown" and client_rate is not None:
        values["predicted_per_second"] = client_rate
        source = "client"
    if "ttft_ms" not in values and ttft_ms is not None:
        values["ttft_ms"] = ttft_ms  # seen from here: includes the network and any queue
    return RemoteTimings(**values, endpoint=endpoint, model=model, rate_source=source)
