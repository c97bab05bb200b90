"""Requests for the server soak: valid ones, and hostile ones a client could send by malice or
by mistake, each with the statuses that are a right answer.

Public API:
    Target(key, model, vocab, kinds, max_tokens, max_body, max_tokens_cap)   what is served
    Probe(family, method, path, body, key, expect, stream)                   one request
    make_probe(rng, target, hostile) -> Probe
    HOSTILE: the hostile families, by name

Hostile families: token ids past the vocabulary, bodies that are not JSON (or not UTF-8),
nesting bombs, values of the wrong type, numbers with thousands of digits (and NaN, 1e400),
unpaired surrogates and NUL characters, bad API keys (missing, wrong, non-ASCII, huge), bodies
over the limit, wrong endpoints or methods and max_tokens over the cap. A right answer to any
of them is a 4xx; a 5xx, a hang or a dead server is a finding.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from app import kinds as draft_kinds
from app.bench.soak import PROMPTS


@dataclass(frozen=True)
class Target:
    key: bytes | None  # the server's API key as UTF-8 bytes (None: no key)
    model: str
    vocab: int
    kinds: tuple[str, ...]  # draft kinds the server can run
    max_tokens: int  # the most a valid probe asks for
    max_body: int
    max_tokens_cap: int


@dataclass(frozen=True)
class Probe:
    family: str  # "valid" or a hostile family
    method: str
    path: str
    body: bytes | None
    key: bytes | None  # the bearer token as sent (None: no Authorization header)
    expect: tuple[int, ...]  # right statuses
    stream: bool = False

    @property
    def valid(self) -> bool:
        return self.family == "valid"


def _dump(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def _valid_body(rng: random.Random, t: Target) -> tuple[str, dict]:
    """A request the server must answer: chat, text or token-id completion."""
    body: dict = {"max_tokens": rng.randint(1, t.max_tokens)}
    if rng.random() < 0.3:
        body["model"] = t.model
    if rng.random() < 0.5:
        body["temperature"] = rng.choice([0.0, 0.7, 1.0])
        body["seed"] = rng.randrange(2**31)
    if rng.random() < 0.5:
        body["draftpair"] = {"draft_kind": rng.choice(t.kinds)}
        if rng.random() < 0.5:  # earlier replies are kept per conversation a client names
            body["draftpair"]["conversation"] = f"soak-{rng.randrange(6)}"
    if rng.random() < 0.2:
        body["stop"] = [rng.choice(["\n", ".", " the", "?"])]
    shape = rng.choice(["chat", "chat", "text", "ids"])
    if shape == "chat":
        messages = [{"role": "user", "content": rng.choice(PROMPTS)}]
        if rng.random() < 0.3:
            messages.insert(0, {"role": "system", "content": "Answer briefly."})
        return "/v1/chat/completions", {**body, "messages": messages}
    if shape == "text":
        return "/v1/completions", {**body, "prompt": rng.choice(PROMPTS)}
    ids = [rng.randrange(t.vocab) for _ in range(rng.randint(1, 24))]
    ids[rng.randrange(len(ids))] = t.vocab - 1  # the last id the model has
    return "/v1/completions", {**body, "prompt": ids}


def valid(rng: random.Random, t: Target) -> Probe:
    path, body = _valid_body(rng, t)
    stream = rng.random() < 0.3
    if stream:
        body["stream"] = True
    return Probe("valid", "POST", path, _dump(body), t.key, (200,), stream)


def _hostile(family: str, path: str, body: bytes | dict, t: Target,
             expect: tuple[int, ...] = (400,), **kw) -> Probe:
    data = body if isinstance(body, bytes) else _dump(body)
    return Probe(family, kw.pop("method", "POST"), path, data, kw.pop("key", t.key), expect)


def bad_token_ids(rng: random.Random, t: Target) -> Probe:
    _, body = _valid_body(rng, t)
    bad = rng.choice([t.vocab, t.vocab + rng.randrange(1, 1000), 99_999_999, 2**40, -1, -2**70])
    ids = [rng.randrange(t.vocab) for _ in range(rng.randint(0, 8))]
    ids.insert(rng.randint(0, len(ids)), bad)
    body.pop("messages", None)
    return _hostile("bad-token-ids", "/v1/completions", {**body, "prompt": ids}, t)


def bad_json(rng: random.Random, t: Target) -> Probe:
    good = _dump({"prompt": "Hello", "max_tokens": 1})
    data = rng.choice([
        good[: rng.randint(0, len(good) - 1)], b"", b"{", b'{"prompt": }', b"\xff\xfe{}",
        b'{"prompt": "caf\xe9"}', b"[1, 2]", b"null", b'"text"', good + b" trailing",
        bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))),
    ])
    return _hostile("bad-json", "/v1/completions", data, t)


def deep_nesting(rng: random.Random, t: Target) -> Probe:
    depth = rng.choice([33, 100, 1000, 5000, 50_000])
    opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
    nest = opener * depth + b"1" + closer * depth
    data = rng.choice([nest, b'{"prompt": "hi", "x": ' + nest + b"}",
                       b'{"messages": ' + nest + b"}"])
    return _hostile("deep-nesting", rng.choice(["/v1/completions", "/v1/chat/completions"]),
                    data, t, (400, 413) if len(data) > t.max_body else (400,))


_WRONG = [
    ("messages", [{"role": ["user"], "content": "hi"}]),
    ("messages", [{"role": {"x": 1}, "content": "hi"}]),
    ("messages", [{"role": 7, "content": "hi"}]),
    ("messages", [{"role": "user", "content": 42}]),
    ("messages", [{"role": "user", "content": [{"type": "image_url", "url": "x"}]}]),
    ("messages", {"role": "user", "content": "hi"}),
    ("messages", "hi"),
    ("messages", [["user", "hi"]]),
    ("max_tokens", "12"),
    ("max_tokens", [1]),
    ("max_tokens", 0),
    ("max_tokens", 1.5),
    ("temperature", "hot"),
    ("temperature", -1),
    ("top_p", 0),
    ("stream", "yes"),
    ("stop", 5),
    ("stop", ["x"] * 100),
    ("draftpair", [1]),
    ("draftpair", {"draft_kind": [draft_kinds.OFF]}),
    ("draftpair", {"draft_width": "wide"}),
    ("draftpair", {"nope": 1}),
    ("n", 3),
    ("seed", -1),
    ("model", ["a"] * 100),
    ("stream_options", "x"),
]


def wrong_types(rng: random.Random, t: Target) -> Probe:
    field, value = rng.choice(_WRONG)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, field: value}
    expect = (404,) if field == "model" else (400,)
    return _hostile("wrong-types", "/v1/chat/completions", body, t, expect)


def huge_numbers(rng: random.Random, t: Target) -> Probe:
    field = rng.choice(["max_tokens", "top_k", "seed", "n", "temperature", "top_p",
                        "n_predict", "speculative.n_max"])
    digits = "9" * rng.choice([30, 400, 4300, 5000, 20_000])
    value = rng.choice([digits, "-" + digits, "1e400", "-1e400", "NaN", "Infinity",
                        "1" + "0" * 40])
    count = "" if field in ("max_tokens", "n_predict") else '"max_tokens": 1, '
    data = f'{{"prompt": "hi", {count}"{field}": {value}}}'.encode()
    # a top-k past the vocabulary only means "off": a right answer either way
    fine = field == "top_k" and value.isdigit() and len(value) <= 4000
    return _hostile("huge-numbers", "/v1/completions", data, t, (200, 400) if fine else (400,))


def bad_text(rng: random.Random, t: Target) -> Probe:
    s = rng.choice(["\\ud800", "\\udfff", "a\\ud83d", "\\udc00b", "\\u0000", "x\\u0000y"])
    data = rng.choice([
        f'{{"prompt": "hi {s}"}}',
        f'{{"messages": [{{"role": "user", "content": "{s}"}}]}}',
        f'{{"messages": [{{"role": "system", "content": "{s}"}}, '
        f'{{"role": "user", "content": "hi"}}]}}',
        f'{{"prompt": "hi", "stop": ["{s}"]}}',
        f'{{"prompt": "hi", "{s}": 1}}',
    ]).encode()
    path = "/v1/chat/completions" if b"messages" in data else "/v1/completions"
    return _hostile("surrogates-nul", path, data, t)


def bad_keys(rng: random.Random, t: Target) -> Probe:
    if t.key is None:  # nothing to get wrong: send a wrong type instead
        return wrong_types(rng, t)
    key = rng.choice([None, b"", b"wrong", t.key[:-1], t.key + b"x", "clé".encode("latin-1"),
                      bytes([0xFF, 0xC3]), "ключ".encode(), b"\x80" * 64, b"k" * 8000])
    body = {"prompt": "hi", "max_tokens": 1}
    path, method = rng.choice([("/v1/completions", "POST"), ("/v1/models", "GET"),
                               ("/v1/draftpair/status", "GET")])
    return Probe("bad-keys", method, path, _dump(body) if method == "POST" else None, key, (401,))


def oversized(rng: random.Random, t: Target) -> Probe:
    data = _dump({"prompt": "x" * (t.max_body + rng.randint(1, 4096))})
    return _hostile("oversized", "/v1/completions", data, t, (413,))


def wrong_endpoint(rng: random.Random, t: Target) -> Probe:
    method, path, status = rng.choice([("GET", "/v1/chat/completions", 405),
                                       ("POST", "/v1/nothing", 404),
                                       ("DELETE", "/v1/models", 405),
                                       ("POST", "/v1/models/" + "x" * 300, 405),
                                       ("GET", "/v1/models/no-such-model", 404)])
    return Probe("wrong-endpoint", method, path, b"{}" if method == "POST" else None, t.key,
                 (status,))


def over_cap(rng: random.Random, t: Target) -> Probe:
    body = {"prompt": "hi", "max_tokens": t.max_tokens_cap + rng.randint(1, 10**6)}
    return _hostile("over-cap", "/v1/completions", body, t)


HOSTILE: dict[str, Callable[[random.Random, Target], Probe]] = {
    "bad-token-ids": bad_token_ids, "bad-json": bad_json, "deep-nesting": deep_nesting,
    "wrong-types": wrong_types, "huge-numbers": huge_numbers, "surrogates-nul": bad_text,
    "bad-keys": bad_keys, "oversized": oversized, "wrong-endpoint": wrong_endpoint,
    "over-cap": over_cap,
}


def make_probe(rng: random.Random, target: Target, hostile: bool) -> Probe:
    if not hostile:
        return valid(rng, target)
    return HOSTILE[rng.choice(list(HOSTILE))](rng, target)
