"""Timings of a remote reply: what the endpoint reported, and nothing it did not.

``RemoteTimings`` is a ``Timings`` whose figures default to ``None`` (unknown): a server that
sends no ``timings`` has no draft counts, memory or verify passes, and showing 0 would claim
it drafted nothing. ``from_server`` fills what llama-server-style ``timings`` and OpenAI
``usage`` carry; the client measures only what it can see itself (time to first token, and a
decode rate from the arrival times when the server reports none; ``rate_source`` says which).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from app.engine.events import Timings

_NUMERIC = {f.name for f in fields(Timings)} - {"draft_kind", "acceptance_rule", "fallback",
                                                "exact"}


@dataclass(frozen=True)
class RemoteTimings(Timings):
    prompt_n: int | None = None  # type: ignore[assignment]
    prompt_ms: float | None = None  # type: ignore[assignment]
    prompt_per_second: float | None = None  # type: ignore[assignment]
    predicted_n: int | None = None  # type: ignore[assignment]
    predicted_ms: float | None = None  # type: ignore[assignment]
    predicted_per_second: float | None = None  # type: ignore[assignment]
    draft_n: int | None = None  # type: ignore[assignment]
    draft_n_accepted: int | None = None  # type: ignore[assignment]
    draft_rounds: int | None = None  # type: ignore[assignment]
    draft_kind: str = "remote"
    accept_len_mean: float | None = None  # type: ignore[assignment]
    acceptance_rate: float | None = None  # type: ignore[assignment]
    tokens_per_verify: float | None = None  # type: ignore[assignment]
    verify_passes: int | None = None  # type: ignore[assignment]
    draft_ms: float | None = None  # type: ignore[assignment]
    verify_ms: float | None = None  # type: ignore[assignment]
    rollback_ms: float | None = None  # type: ignore[assignment]
    ttft_ms: float | None = None  # type: ignore[assignment]
    peak_memory_bytes: int | None = None  # type: ignore[assignment]
    draft_width: int | None = None  # type: ignore[assignment]
    acceptance_rule: str = "unknown"
    exact: bool = True
    endpoint: str = ""
    model: str = ""
    rate_source: str = "unknown"  # "server" | "client" (arrival times) | "unknown"


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
    for key, value in (timings or {}).items():
        if key in _NUMERIC and isinstance(value, int | float) and not isinstance(value, bool):
            values[key] = value
    t = timings or {}
    if isinstance(t.get("draft_kind"), str):
        values["draft_kind"] = t["draft_kind"]
    if isinstance(t.get("acceptance_rule"), str):
        values["acceptance_rule"] = t["acceptance_rule"]
    if isinstance(t.get("fallback"), str):
        values["fallback"] = t["fallback"]
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
