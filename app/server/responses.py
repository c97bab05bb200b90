"""Engine results -> OpenAI response bodies and SSE chunks, with llama-server ``timings``.

``timings`` carries llama-server's names (``prompt_n``, ``prompt_ms``, ``prompt_per_token_ms``,
``prompt_per_second``, ``predicted_n``, ``predicted_ms``, ``predicted_per_token_ms``,
``predicted_per_second``, ``draft_n``, ``draft_n_accepted``) and DraftPair's own figures
(``draft_kind``, ``draft_rounds``, ``accept_len_mean``, ``tokens_per_verify``, ``fallback``...).
It rides in the non-stream body and in the last stream chunk (the one with ``finish_reason``),
beside OpenAI's ``usage``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

FINISH = {"stop": "stop", "length": "length", "cancelled": "stop", "error": "stop"}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def timings_dict(t: Any) -> dict[str, Any]:
    d = t.to_dict()
    d["prompt_per_token_ms"] = t.prompt_ms / t.prompt_n if t.prompt_n else 0.0
    d["predicted_per_token_ms"] = t.predicted_ms / t.predicted_n if t.predicted_n else 0.0
    return d


def usage_dict(done: Any) -> dict[str, int]:
    prompt = int(done.timings.prompt_n) + int(done.timings.cache_n)  # read + reused
    completion = len(done.token_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def sse(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()


class Shaper:
    """Builds the bodies of one response (chat or text completion) with one id and time."""

    def __init__(self, *, chat: bool, model: str, return_tokens: bool = False):
        self.chat = chat
        self.model = model
        self.return_tokens = return_tokens
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": None}

    # -- streaming -----------------------------------------------------------------------
    def first_chunk(self) -> dict[str, Any] | None:
        if not self.chat:
            return None
        return {**self._base("chat.completion.chunk"), "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
             "finish_reason": None}]}

    def token_chunk(self, text: str, token_ids: list[int], from_draft: list[bool]
                    ) -> dict[str, Any]:
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "delta": {"content": text}}
            body = self._base("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": text}
            body = self._base("text_completion")
        choice.update(logprobs=None, finish_reason=None)
        body["choices"] = [choice]
        if self.return_tokens:
            body["draftpair"] = {"token_ids": token_ids, "from_draft": from_draft}
        return body

    def final_chunk(self, done: Any, tail: str = "") -> dict[str, Any]:
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "delta": {"content": tail} if tail else {}}
            body = self._base("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": tail}
            body = self._base("text_completion")
        choice.update(logprobs=None, finish_reason=FINISH.get(done.finish_reason, "stop"))
        body["choices"] = [choice]
        body["usage"] = usage_dict(done)
        body["timings"] = timings_dict(done.timings)
        return body

    def usage_chunk(self, done: Any) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._base(obj), "choices": [], "usage": usage_dict(done)}

    # -- whole response ------------------------------------------------------------------
    def response(self, done: Any) -> dict[str, Any]:
        finish = FINISH.get(done.finish_reason, "stop")
        if self.chat:
            body = self._base("chat.completion")
            body["choices"] = [{"index": 0, "message": {"role": "assistant",
                                                        "content": done.text},
                                "logprobs": None, "finish_reason": finish}]
        else:
            body = self._base("text_completion")
            body["choices"] = [{"index": 0, "text": done.text, "logprobs": None,
                                "finish_reason": finish}]
        body["usage"] = usage_dict(done)
        body["timings"] = timings_dict(done.timings)
        if self.return_tokens:
            body["draftpair"] = {"token_ids": list(done.token_ids)}
        return body
