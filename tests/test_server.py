"""``draftpair serve`` over real HTTP on 127.0.0.1, driven by the real ``openai`` client, on
tiny real models: identity of greedy speculation with plain decoding, timings, cancellation on
disconnect, the queue policy and the JSON errors."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from app.server.protocol import Limits
from app.server.runner import ServerConfig, ServerHandle
from tests.builders import make_checkpoint

KEY = "test-key"
MAX_BODY = 64 * 1024
CHAT = [{"role": "system", "content": "Fix typos."},
        {"role": "user", "content": "The cat sat on the mat. The dog sat on the log."}]


@pytest.fixture(scope="module")
def server(tiny_models):
    handle = ServerHandle(ServerConfig(
        model=str(tiny_models.target), draft=str(tiny_models.draft), port=0, api_key=KEY,
        max_queue=1, limits=Limits(max_body_bytes=MAX_BODY, max_tokens_cap=4096),
    ))
    handle.start()
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)


def _model(server) -> str:
    return server.engine.info.id


def _chat(client, server, *, kind, stream, max_tokens=40, messages=CHAT, **extra):
    body = {"draftpair": {"draft_kind": kind, "return_tokens": True,
                          "allow_fallback": False, **extra}}
    kw = dict(model=_model(server), messages=messages, max_tokens=max_tokens, temperature=0,
              extra_body=body)
    if not stream:
        r = client.chat.completions.create(**kw)
        extra_fields = r.model_extra or {}
        return (r.choices[0].message.content, extra_fields["draftpair"]["token_ids"],
                extra_fields["timings"], r.usage, r.choices[0].finish_reason)
    text, ids, last = "", [], None
    for chunk in client.chat.completions.create(stream=True, **kw):
        ext = (chunk.model_extra or {}).get("draftpair")
        if ext:
            ids += ext["token_ids"]
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            last = chunk
    extra_fields = last.model_extra or {}
    return text, ids, extra_fields["timings"], last.usage, last.choices[0].finish_reason


def _post(server, path, data: bytes, *, key=KEY, method="POST"):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(server.url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read()), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers)


def _wait(predicate, what: str, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


# -- the API -------------------------------------------------------------------------------------


def test_models_lists_the_loaded_pair(client, server):
    models = client.models.list().data
    assert [m.id for m in models] == [_model(server)]
    card = models[0].model_extra["draftpair"]
    # auto speculation is the default wherever the pair has a drafter (it uses the draft too)
    assert card["default_kind"] == "auto" and card["draft"] == "tiny-draft"
    assert card["draft_kinds"]["prompt-lookup"] and not card["draft_kinds"]["mtp"]
    assert client.models.retrieve(_model(server)).id == _model(server)


@pytest.mark.parametrize("kind", ["prompt-lookup", "full-model", "auto"])
@pytest.mark.parametrize("stream", [False, True])
def test_greedy_speculation_over_http_equals_plain(client, server, kind, stream):
    plain = _chat(client, server, kind="none", stream=stream)
    spec = _chat(client, server, kind=kind, stream=stream)
    assert len(plain[1]) == 40 and plain[4] == "length"
    assert spec[1] == plain[1]
    assert spec[0] == plain[0]
    t = spec[2]
    assert t["draft_kind"] == kind and t["fallback"] is None
    assert t["draft_n"] > 0 and 0 <= t["draft_n_accepted"] <= t["draft_n"]
    assert t["draft_rounds"] > 0 and t["acceptance_rule"] == "greedy"
    assert t["predicted_n"] == spec[3].completion_tokens == 40
    assert t["prompt_n"] == spec[3].prompt_tokens
    assert plain[2]["draft_n"] == 0 and plain[2]["draft_kind"] == "none"
    if kind == "auto":  # what it did, per source, and every step counted once
        sources = t["sources"]
        assert {"prompt-lookup", "full-model", "plain"} <= set(sources)
        assert sum(v["rounds"] for v in sources.values()) == t["verify_passes"]
    else:
        assert t["sources"] == {}


def test_chat_template_is_applied(client, server, tiny_models):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_models.target))
    text = tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n")
    expected = tok(text, add_special_tokens=False)["input_ids"]
    _, _, timings, usage, _ = _chat(client, server, kind="none", stream=False, max_tokens=2)
    assert usage.prompt_tokens == timings["prompt_n"] == len(expected)


def test_text_completions_stream_and_not(client, server):
    kw = dict(model=_model(server), prompt="The quick brown fox", max_tokens=24, temperature=0)
    whole = client.completions.create(**kw, extra_body={"draftpair": {"draft_kind": "none"}})
    pieces, last = [], None
    for chunk in client.completions.create(
        **kw, stream=True, extra_body={"draftpair": {"draft_kind": "prompt-lookup"}}
    ):
        pieces.append(chunk.choices[0].text)
        last = chunk
    assert "".join(pieces) == whole.choices[0].text and whole.usage.completion_tokens == 24
    assert last.choices[0].finish_reason == "length"
    assert last.model_extra["timings"]["draft_kind"] == "prompt-lookup"
    assert whole.model_extra["timings"]["predicted_n"] == 24


def test_llama_server_fields_are_read(server):
    body = {"prompt": "The quick brown fox", "n_predict": 9, "top_k": 1,
            "speculative.n_max": 3, "draftpair": {"draft_kind": "prompt-lookup"}}
    status, data, _ = _post(server, "/v1/completions", json.dumps(body).encode())
    assert status == 200, data
    assert data["usage"]["completion_tokens"] == 9
    assert data["timings"]["draft_width"] == 3


def test_lookup_assist_is_a_request_field(server):
    """On by default, off on request; a value that is not a boolean is refused by name."""
    body = {"prompt": "The cat sat on the mat. The cat sat", "max_tokens": 6, "top_k": 1,
            "draftpair": {"draft_kind": "full-model", "lookup_assist": False}}
    status, data, _ = _post(server, "/v1/completions", json.dumps(body).encode())
    assert status == 200, data
    body["draftpair"]["lookup_assist"] = "no"
    status, data, _ = _post(server, "/v1/completions", json.dumps(body).encode())
    assert status == 400 and data["error"]["param"] == "draftpair.lookup_assist", data


def test_trees_are_a_request_field(server):
    """Trees on request, the timings counting tree rounds; an unknown mode is refused."""
    body = {"prompt": "The cat sat on the mat. The cat sat", "max_tokens": 8, "top_k": 1,
            "draftpair": {"draft_kind": "full-model", "lookup_assist": False,
                          "trees": "flat"}}
    status, data, _ = _post(server, "/v1/completions", json.dumps(body).encode())
    assert status == 200, data
    assert "tree_rounds" in data["timings"]
    body["draftpair"]["trees"] = "sometimes"
    status, data, _ = _post(server, "/v1/completions", json.dumps(body).encode())
    assert status == 400 and data["error"]["param"] == "draftpair.trees", data


# -- cancellation and the queue ----------------------------------------------------------------


def _stream_until_tokens(client, server, n: int, max_tokens: int = 1500):
    stream = client.completions.create(
        model=_model(server), prompt="Once upon a time", max_tokens=max_tokens, temperature=0,
        stream=True, extra_body={"draftpair": {"draft_kind": "none"}})
    it = iter(stream)
    for _ in range(n):
        next(it)
    return stream


def test_disconnect_cancels_the_request(client, server):
    before = len(server.engine.records)
    stream = _stream_until_tokens(client, server, 3)
    stream.close()  # the client goes away mid-reply
    _wait(lambda: len(server.engine.records) > before, "the request to end")
    record = server.engine.records[-1]
    assert record.finish_reason == "cancelled"
    assert record.predicted_n < record.max_tokens == 1500
    # the engine is free again and answers the next request in full
    assert _chat(client, server, kind="none", stream=False, max_tokens=5)[4] == "length"
    # the reply is sent before the engine has put the request's record away
    _wait(lambda: server.engine.status()["running"] is None, "the engine to be idle")
    req = urllib.request.Request(server.url + "/v1/draftpair/status",
                                 headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        status = json.loads(resp.read())
    assert [r["finish_reason"] for r in status["recent"][-2:]] == ["cancelled", "length"]
    assert status["queue"] == {"running": None, "waiting": 0, "max_queue": 1}


def test_requests_queue_then_get_429(client, server):
    reference = _chat(client, server, kind="prompt-lookup", stream=False, max_tokens=12)
    running = _stream_until_tokens(client, server, 2)  # occupies the engine
    results: dict[str, object] = {}

    def queued() -> None:
        results["b"] = _chat(client, server, kind="prompt-lookup", stream=False, max_tokens=12)

    t = threading.Thread(target=queued)
    t.start()
    try:
        _wait(lambda: server.engine.status()["waiting"] == 1, "the second request to queue")
        with pytest.raises(openai.RateLimitError) as info:
            client.chat.completions.create(model=_model(server), messages=CHAT, max_tokens=4)
        assert "busy" in info.value.message
        assert info.value.response.headers.get("retry-after") == "1"
    finally:
        running.close()
        t.join(60)
    assert results["b"][1] == reference[1]  # the queued request ran after the first, in full


def test_a_queued_request_reports_its_wait_in_the_time_to_first_token(client, server):
    running = _stream_until_tokens(client, server, 2)  # occupies the engine
    results: dict[str, object] = {}

    def queued() -> None:
        results["b"] = _chat(client, server, kind="prompt-lookup", stream=False, max_tokens=4)

    t = threading.Thread(target=queued)
    t.start()
    try:
        _wait(lambda: server.engine.status()["waiting"] == 1, "the second request to queue")
        seen_waiting = time.perf_counter()  # it arrived before this
        for _ in range(5):  # the first request keeps the engine a while longer
            next(iter(running))
    finally:
        freed = time.perf_counter()  # its first token comes after this
        running.close()
        t.join(60)
    ttft_ms = results["b"][2]["ttft_ms"]
    record = server.engine.records[-1]
    assert ttft_ms >= (freed - seen_waiting) * 1e3
    assert ttft_ms >= record.queued_ms > 0


# -- errors ------------------------------------------------------------------------------------


def test_malformed_and_bad_requests_get_json_4xx(server):
    good = {"model": _model(server), "messages": CHAT, "max_tokens": 4}
    cases = [
        (b"{not json", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_json"),
        (json.dumps({**good, "model": "no-such-model"}).encode(), 404, "model_not_found"),
        (json.dumps({**good, "max_tokens": 100000}).encode(), 400, "max_tokens_too_large"),
        (json.dumps({**good, "max_tokens": 3000}).encode(), 400, "context_length_exceeded"),
        (json.dumps({**good, "draftpair": {"draft_knd": "none"}}).encode(), 400, None),
        (json.dumps({**good, "draftpair": {"draft_kind": "mtp", "allow_fallback": False}})
         .encode(), 400, "draft_kind_unavailable"),
        (json.dumps({**good, "messages": []}).encode(), 400, None),
        (json.dumps({**good, "n": 2}).encode(), 400, None),
        (json.dumps({**good, "tools": [{"type": "function"}]}).encode(), 400, None),
        (json.dumps({**good, "temperature": "hot"}).encode(), 400, None),
        (b"x" * (MAX_BODY + 1), 413, "request_too_large"),
    ]
    for data, status, code in cases:
        got, body, _ = _post(server, "/v1/chat/completions", data)
        assert got == status, (data[:60], body)
        assert body["error"]["message"] and "Traceback" not in body["error"]["message"]
        if code:
            assert body["error"]["code"] == code, body
    assert _post(server, "/v1/nothing", b"{}")[0] == 404
    assert _post(server, "/v1/chat/completions", None, method="GET")[0] == 405
    status, body, headers = _post(server, "/v1/chat/completions", json.dumps(good).encode(),
                                  key="wrong")
    assert status == 401 and body["error"]["type"] == "authentication_error"
    assert _post(server, "/v1/chat/completions", json.dumps(good).encode(), key=None)[0] == 401


def test_openai_client_sees_unknown_model_as_not_found(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=CHAT, max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny-target", messages=CHAT, max_tokens=10**6,
                                       stream=True)


# -- the command line ---------------------------------------------------------------------------


def test_cli_serve_announces_its_url_and_stops_on_ctrl_c(tiny_models):
    import re
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--model", str(tiny_models.target), "--port", "0",
         "--draft-kind", "prompt-lookup", "--max-queue", "0"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    try:
        url = None
        deadline = time.monotonic() + 120
        lines = []
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
            url = m.group(1) if m else None
        assert url, lines
        assert "prompt-lookup" in lines[-1]
        with urllib.request.urlopen(url + "/health", timeout=10) as resp:
            health = json.loads(resp.read())
        assert health["status"] == "ok" and health["engine"]["alive"]
        assert health["engine"]["model"] == "tiny-target"  # no key set: anyone may read it
        body = json.dumps({"prompt": "The cat", "max_tokens": 4}).encode()
        req = urllib.request.Request(url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            data = json.loads(resp.read())
        assert data["timings"]["draft_kind"] == "prompt-lookup"
        assert data["usage"]["completion_tokens"] == 4
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 130
    assert "Traceback" not in proc.stderr.read()


def test_default_max_tokens_shrinks_to_fit_the_context(server):
    prompt = [5, 6, 7, 8] * 400  # 1600 of the model's 2048 positions
    body = {"prompt": prompt, "draftpair": {"draft_kind": "none"}}
    status, data, _ = _post(server, "/v1/completions", json.dumps(body).encode())
    assert status == 200, data
    assert data["usage"]["prompt_tokens"] == 1600
    assert data["usage"]["completion_tokens"] <= 2048 - 1600
    status, data, _ = _post(server, "/v1/completions",
                            json.dumps({**body, "max_tokens": 512}).encode())
    assert status == 400 and data["error"]["code"] == "context_length_exceeded"


def test_the_server_admits_by_the_sessions_context_length(tmp_path):
    # the limit comes from a key other than max_position_embeddings: the server and the
    # Session must read the same one, through the Session's one admission path
    folder = make_checkpoint(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    del config["max_position_embeddings"]
    (folder / "config.json").write_text(json.dumps({**config, "max_seq_len": 48}))
    handle = ServerHandle(ServerConfig(model=str(folder), port=0))
    handle.start()
    try:
        assert handle.engine.info.context_length == 48
        body = {"prompt": [5, 6, 7, 8] * 10, "draftpair": {"draft_kind": "none"}}
        status, data, _ = _post(handle, "/v1/completions", json.dumps(body).encode(), key=None)
        assert status == 200, data
        assert data["usage"]["prompt_tokens"] == 40
        assert data["usage"]["completion_tokens"] <= 8
        status, data, _ = _post(handle, "/v1/completions",
                                json.dumps({**body, "max_tokens": 20}).encode(), key=None)
        assert status == 400 and data["error"]["code"] == "context_length_exceeded", data
        assert "48 tokens" in data["error"]["message"]
    finally:
        handle.stop()


def test_cache_prompt_reuses_a_shared_beginning(server):
    first = [5, 6, 7, 8] * 50
    body = {"prompt": first, "max_tokens": 6, "cache_prompt": True,
            "draftpair": {"draft_kind": "none"}}
    status, data, _ = _post(server, "/v1/completions", json.dumps(body).encode())
    assert status == 200, data
    assert data["timings"]["cache_n"] == 0
    longer = {**body, "prompt": first + [9, 10, 11] * 10}
    status, kept, _ = _post(server, "/v1/completions", json.dumps(longer).encode())
    assert status == 200, kept
    assert kept["timings"]["cache_n"] >= 199 and kept["timings"]["prompt_n"] <= 31
    assert kept["usage"]["prompt_tokens"] == 230  # read + reused
    status, fresh, _ = _post(server, "/v1/completions",
                             json.dumps({**longer, "cache_prompt": False}).encode())
    assert fresh["timings"]["cache_n"] == 0 and fresh["timings"]["prompt_n"] == 230
    assert fresh["choices"][0]["text"] == kept["choices"][0]["text"]
