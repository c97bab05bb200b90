"""Earlier replies on the server: kept per API key and conversation, within the cap the
server was started with, reported by the status endpoint; greedy replies identical to plain."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from app import kinds
from app.server.protocol import Limits
from app.server.runner import ServerConfig, ServerHandle

KEY = "clé-secrète"
CAP = 24_000


@pytest.fixture(scope="module")
def server(tiny_models):
    handle = ServerHandle(ServerConfig(
        model=str(tiny_models.target), port=0, api_key=KEY, max_queue=4,
        limits=Limits(max_tokens_cap=256), reply_memory_bytes=CAP))
    handle.start()
    yield handle
    handle.stop()


def call(server, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server.url + path, data=data, method="POST" if data else "GET",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {KEY}".encode().decode(
                                              "latin-1")})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def complete(server, prompt: str, kind: str, **ext) -> list[int]:
    status, body = call(server, "/v1/completions", {
        "prompt": prompt, "max_tokens": 24, "temperature": 0,
        "draftpair": {"draft_kind": kind, "return_tokens": True, **ext}})
    assert status == 200, body
    return body["draftpair"]["token_ids"]


def test_replies_are_kept_per_conversation_within_the_cap(server):
    kind = next(p.name for p in kinds.drafting() if p.keeps_replies)
    prompts = ["The cat sat on", "def add(a", "Once upon a time", "Hello! How can"]
    for i in range(12):
        prompt = prompts[i % len(prompts)] + " " * (i // len(prompts))
        plain = complete(server, prompt, kinds.OFF)
        assert complete(server, prompt, kind, conversation=f"c{i % 3}") == plain
        status, state = call(server, "/v1/draftpair/status")
        assert status == 200
        memory = state["reply_memory"]
        assert memory["cap_bytes"] == CAP and memory["bytes"] <= CAP, memory
    assert 1 <= memory["scopes"] <= 3 and memory["replies"] >= 1


def test_a_conversation_name_is_checked(server):
    status, body = call(server, "/v1/completions", {
        "prompt": "Hi", "max_tokens": 2, "draftpair": {"conversation": ["x"]}})
    assert status == 400 and body["error"]["param"] == "draftpair.conversation"
    status, body = call(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 2,
                                                    "user": "u" * 500})
    assert status == 400 and body["error"]["param"] == "user"
