"""OpenAI request bodies -> ``GenerationRequest``: validation, limits and the extension field.

Per-request speculation goes in ``draftpair`` (unknown keys are refused, so a typo is heard)::

    "draftpair": {"draft_kind": "prompt-lookup", "draft_width": 7, "allow_fallback": true,
                  "ngram_min": 2, "ngram_max": 3, "adaptive": true, "lookup_assist": true,
                  "return_tokens": false, "trees": "off"}  # trees: "off" | "on" | "flat"

llama-server's own top-level fields are read too: ``n_predict``, ``top_k``, ``min_p``,
``repeat_penalty`` and ``"speculative.n_max"`` (the width). Missing values take the server's
defaults (the loaded pair's draft kind, greedy decoding). Fields that would change the result
in ways the engine cannot honour (tools, logprobs, penalties, n > 1...) get a 400, never a
silent ignore.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from app.server.bodies import shown
from app.server.engine_thread import ModelInfo
from app.server.errors import ApiError

ROLES = {"system", "developer", "user", "assistant", "tool"}
EXTENSION_KEYS = {"draft_kind", "draft_width", "allow_fallback", "ngram_min", "ngram_max",
                  "adaptive", "lookup_assist", "return_tokens", "conversation", "trees"}
TREE_MODES = ("off", "on", "flat")
MAX_CONVERSATION_CHARS = 128
MAX_STOPS = 16
MAX_STOP_CHARS = 256


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 1 << 20
    max_tokens_cap: int = 4096  # the most a request may ask for
    default_max_tokens: int = 512  # when a request does not say
    temperature: float = 0.0  # default when a request does not say
    body_timeout_s: float = 30.0  # a request body must arrive within this


@dataclass(frozen=True)
class Parsed:
    request: Any  # GenerationRequest
    stream: bool
    include_usage: bool
    return_tokens: bool
    model: str
    max_tokens_given: bool = True  # False: the default, shortened to fit the context
    # the client's name for a conversation (draftpair.conversation, else OpenAI's "user"):
    # earlier replies are kept per API key and per this name
    conversation: str | None = None


def parse_chat(body: dict[str, Any], info: ModelInfo, limits: Limits) -> Parsed:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "'messages' must be a non-empty list of {role, content}.",
                       param="messages")
    messages = tuple(_message(m, i) for i, m in enumerate(raw))
    return _common(body, info, limits, messages=messages, chat=True)


def parse_completion(body: dict[str, Any], info: ModelInfo, limits: Limits) -> Parsed:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    for name in ("echo",):
        if body.get(name):
            raise ApiError(400, f"'{name}' is not supported by this server.", param=name)
    if body.get("suffix"):
        raise ApiError(400, "'suffix' (fill in the middle) is not supported.", param="suffix")
    if _int(body, "best_of", 1, 1, 1) != 1:
        raise ApiError(400, "'best_of' must be 1.", param="best_of")
    if isinstance(prompt, str):
        if not prompt:
            raise ApiError(400, "'prompt' is empty.", param="prompt")
        return _common(body, info, limits, prompt=prompt, chat=False)
    if isinstance(prompt, list) and prompt and all(
        isinstance(t, int) and not isinstance(t, bool) for t in prompt
    ):
        return _common(body, info, limits, prompt_tokens=_token_ids(prompt, info), chat=False)
    raise ApiError(400, "'prompt' must be a string or a list of token ids (one prompt).",
                   param="prompt")


def _token_ids(prompt: list[int], info: ModelInfo) -> tuple[int, ...]:
    """Token ids the model can read: an id past its embedding table would make it read
    memory past the table's end (garbage text, or the process dies)."""
    rows = info.vocab_rows
    for i, t in enumerate(prompt):
        if t < 0 or (rows is not None and t >= rows):
            span = f"0 to {rows - 1}" if rows is not None else "0 or more"
            raise ApiError(400, f"'prompt[{i}]' is the token id {shown(t)}; this model's token "
                           f"ids are {span}.", param=f"prompt[{i}]", code="invalid_token_id")
    return tuple(prompt)


def _message(m: Any, i: int) -> dict[str, str]:
    if not isinstance(m, dict):
        raise ApiError(400, f"messages[{i}] must be an object.", param=f"messages[{i}]")
    role = m.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise ApiError(400, f"messages[{i}].role must be one of {', '.join(sorted(ROLES))}.",
                       param=f"messages[{i}].role")
    content = m.get("content")
    if content is None and role == "assistant":
        content = ""
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text"
                    and isinstance(part.get("text"), str)):
                raise ApiError(400, f"messages[{i}].content: only text parts are supported.",
                               param=f"messages[{i}].content")
            parts.append(part["text"])
        content = "".join(parts)
    if not isinstance(content, str):
        raise ApiError(400, f"messages[{i}].content must be a string or text parts.",
                       param=f"messages[{i}].content")
    return {"role": "system" if role == "developer" else role, "content": content}


def _common(body: dict[str, Any], info: ModelInfo, limits: Limits, **source: Any) -> Parsed:
    from app import kinds
    from app.engine.events import GenerationRequest, SamplingParams

    model = body.get("model")
    if model is not None and model not in (info.id, info.target):
        raise ApiError(404, f"The model {shown(model)} does not exist here; this server serves "
                       f"{info.id!r}.", type="invalid_request_error", code="model_not_found",
                       param="model")
    _refuse_unsupported(body)
    if _int(body, "n", 1, 1, 1) != 1:
        raise ApiError(400, "'n' must be 1: this server returns one choice.", param="n")
    max_tokens = None
    for name in ("max_completion_tokens", "max_tokens", "n_predict"):
        if body.get(name) is not None:
            max_tokens = _int(body, name, None, 1, None, huge_ok=True)
            if max_tokens > limits.max_tokens_cap:
                # an int too long for a float, or the +inf a longer one parses as
                huge = isinstance(max_tokens, float) or max_tokens > 10**12
                given = "too large" if huge else f"{max_tokens}"
                raise ApiError(400, f"'{name}' is {given}; this server allows at most "
                               f"{limits.max_tokens_cap}.", param=name, code="max_tokens_too_large")
            break
    ext = body.get("draftpair") or {}
    if not isinstance(ext, dict):
        raise ApiError(400, "'draftpair' must be an object.", param="draftpair")
    unknown = sorted(set(ext) - EXTENSION_KEYS)
    if unknown:
        raise ApiError(400, f"Unknown 'draftpair' field {shown(unknown[0])}; known: "
                       f"{', '.join(sorted(EXTENSION_KEYS))}.",
                       param=f"draftpair.{shown(unknown[0], quote=False)}")
    kind = ext.get("draft_kind", info.default_kind)
    if not isinstance(kind, str) or kind not in kinds.names():
        raise ApiError(400, f"Unknown draft kind {shown(kind)}; choose one of "
                       f"{', '.join(kinds.names())}.", param="draftpair.draft_kind")
    allow_fallback = _bool(ext, "allow_fallback", True, "draftpair.")
    reason = info.kinds.get(kind)  # None when it runs (the off kind always does)
    if reason and not allow_fallback:
        raise ApiError(400, f"Speculation ({kind}) cannot run on this server: {reason}.",
                       param="draftpair.draft_kind", code="draft_kind_unavailable")
    width = _int(ext, "draft_width", None, 1, 64, "draftpair.")
    if width is None:
        width = _int(body, "speculative.n_max", None, 1, 64)
    ngram_min = _int(ext, "ngram_min", 2, 1, 16, "draftpair.")
    ngram_max = _int(ext, "ngram_max", 3, ngram_min, 16, "draftpair.")
    sampling = SamplingParams(
        temperature=_num(body, "temperature", limits.temperature, 0.0, 2.0),
        top_p=_num(body, "top_p", 1.0, 0.0, 1.0),
        top_k=_int(body, "top_k", 0, 0, None),
        min_p=_num(body, "min_p", 0.0, 0.0, 1.0),
        repetition_penalty=_num(body, "repetition_penalty",
                                _num(body, "repeat_penalty", 1.0, 0.0, 10.0), 0.0, 10.0),
        seed=_int(body, "seed", None, 0, 2**63 - 1),
    )
    if sampling.top_p <= 0 or sampling.repetition_penalty <= 0:
        raise ApiError(400, "'top_p' and the repetition penalty must be greater than 0.",
                       param="top_p")
    request = GenerationRequest(
        **source,
        draft_kind=kind,
        draft_width=width if width is not None else info.default_width,
        sampling=sampling,
        max_tokens=max_tokens or limits.default_max_tokens,
        stop=_stops(body.get("stop")),
        allow_fallback=allow_fallback,
        ngram_min=ngram_min,
        ngram_max=ngram_max,
        adaptive=_bool(ext, "adaptive", True, "draftpair."),
        lookup_assist=_bool(ext, "lookup_assist", True, "draftpair."),
        trees=_trees(ext),
        # llama-server's field: continue from the kept state of an earlier request that shares
        # the prompt's beginning (off by default, so measured requests start fresh)
        reuse_cache=_bool(body, "cache_prompt", False),
    )
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object.", param="stream_options")
    return Parsed(
        request=request,
        stream=_bool(body, "stream", False),
        include_usage=_bool(options, "include_usage", False, "stream_options."),
        return_tokens=_bool(ext, "return_tokens", False, "draftpair."),
        model=info.id,
        max_tokens_given=max_tokens is not None,
        conversation=_conversation(ext, body),
    )


def _conversation(ext: dict[str, Any], body: dict[str, Any]) -> str | None:
    for where, holder, name in (("draftpair.conversation", ext, "conversation"),
                                ("user", body, "user")):
        value = holder.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not 0 < len(value) <= MAX_CONVERSATION_CHARS:
            raise ApiError(400, f"'{where}' must be a string of 1 to {MAX_CONVERSATION_CHARS} "
                           "characters.", param=where)
        return value
    return None


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name in ("tools", "functions", "logprobs", "top_logprobs", "logit_bias"):
        if body.get(name):
            raise ApiError(400, f"'{name}' is not supported by this server.", param=name)
    if body.get("tool_choice") not in (None, "none"):
        raise ApiError(400, "'tool_choice' is not supported by this server.", param="tool_choice")
    for name in ("presence_penalty", "frequency_penalty"):
        value = body.get(name)
        if value not in (None, 0, 0.0):
            raise ApiError(400, f"'{name}' is not supported; use 'repetition_penalty'.",
                           param=name)
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise ApiError(400, "'response_format' other than text is not supported.",
                       param="response_format")


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (not isinstance(stops, list) or len(stops) > MAX_STOPS
            or not all(isinstance(s, str) and len(s) <= MAX_STOP_CHARS for s in stops)):
        raise ApiError(400, f"'stop' must be a string or a list of at most {MAX_STOPS} strings "
                       f"of at most {MAX_STOP_CHARS} characters.", param="stop")
    return tuple(s for s in stops if s)


def _trees(ext: dict[str, Any]) -> str:
    mode = ext.get("trees", "off")
    if mode not in TREE_MODES:
        raise ApiError(400, "'draftpair.trees' must be one of " + ", ".join(TREE_MODES) + ".",
                       param="draftpair.trees")
    return str(mode)


def _bool(d: dict[str, Any], key: str, default: bool, prefix: str = "") -> bool:
    value = d.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"'{prefix}{key}' must be true or false.", param=prefix + key)
    return value


def _int(d: dict[str, Any], key: str, default: Any, lo: int | None, hi: int | None,
         prefix: str = "", *, huge_ok: bool = False) -> Any:
    """``d[key]`` as a whole number in [lo, hi]; a number with more digits than any count
    (parsed as +-inf) is out of range, or returned as +inf with ``huge_ok`` and no ``hi``."""
    value = d.get(key)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    huge = isinstance(value, float) and math.isinf(value)  # more digits than any count
    if not huge and (not isinstance(value, int) or isinstance(value, bool)):
        raise ApiError(400, f"'{prefix}{key}' must be an integer.", param=prefix + key)
    if huge and huge_ok and hi is None and value > 0:
        return value
    if huge or (lo is not None and value < lo) or (hi is not None and value > hi):
        if hi is not None:
            span = f"between {lo} and {hi}" if lo is not None else f"at most {hi}"
        elif lo is not None and value < lo:
            span = f"at least {lo}"
        else:
            span = "a smaller number"
        raise ApiError(400, f"'{prefix}{key}' must be {span}.", param=prefix + key)
    return value


def _num(d: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = d.get(key)
    if value is None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ApiError(400, f"'{key}' must be a number.", param=key)
    if not lo <= value <= hi:
        raise ApiError(400, f"'{key}' must be between {lo:g} and {hi:g}.", param=key)
    return float(value)
