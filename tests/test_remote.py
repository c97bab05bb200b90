"""Remote engines: the client against a real ``draftpair serve`` and against a minimal
OpenAI-style endpoint that reports no timings (what llama-server/vLLM/LM Studio look like
without our fields; those servers cannot run here), and the bench's remote row."""

from __future__ import annotations

import json
import threading
import time

import pytest

from app.engine.events import DoneEvent, Timings, TokenEvent
from app.remote.client import RemoteRequest, parse_url, stream_remote
from app.remote.results import RemoteDone, RemoteTimings
from app.server.runner import ServerConfig, ServerHandle, bind, url_for

PIECES = ["Hello", ",", " world", "!"]


@pytest.fixture(scope="module")
def served(tiny_models):
    handle = ServerHandle(ServerConfig(model=str(tiny_models.target),
                                       draft=str(tiny_models.draft), port=0))
    handle.start()
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def plain_endpoint():
    """An OpenAI-compatible stream with usage but no timings and no token ids."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    seen: list[dict] = []

    async def models(request):
        return JSONResponse({"object": "list", "data": [{"id": "other", "object": "model",
                                                          "owned_by": "someone"}]})

    async def chat(request):
        seen.append(await request.json())

        async def events():
            for p in PIECES:
                yield f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': p}}]})}\n\n"
            yield f"data: {json.dumps({'choices': [{'index': 0, 'delta': {}, 'finish_reason': 'length'}]})}\n\n"
            usage = {"prompt_tokens": 7, "completion_tokens": len(PIECES), "total_tokens": 11}
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/models", models),
                            Route("/v1/chat/completions", chat, methods=["POST"])])
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield url_for(sock), seen
    server.should_exit = True
    thread.join(20)
    sock.close()


def test_parse_url_accepts_the_usual_spellings():
    assert parse_url("127.0.0.1:8080").base == "/v1"
    assert parse_url("http://h:1/v1/").base == "/v1"
    assert parse_url("http://h:1/v1/chat/completions").base == "/v1"
    assert parse_url("https://h/api").base == "/api/v1" and parse_url("https://h").port == 443
    with pytest.raises(Exception, match="not an http"):
        parse_url("ftp://h")


def test_client_against_draftpair_serve_matches_the_engine_output(served):
    req = RemoteRequest(url=served.url, prompt="The cat sat on the mat.", max_tokens=16,
                        extension={"draft_kind": "prompt-lookup"})
    events = list(stream_remote(req))
    done = events[-1]
    assert isinstance(done, RemoteDone) and done.finish_reason == "length", done.error
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    ids = [e.token_id for e in tokens if e.token_id >= 0]  # -1: the detokenizer's tail text
    assert ids == list(done.token_ids) and len(done.token_ids) == 16
    assert "".join(e.text for e in tokens) == done.text
    t = done.timings
    assert t.draft_kind == "prompt-lookup" and t.rate_source == "server"
    assert t.predicted_n == 16 and t.draft_n is not None and t.draft_n_accepted is not None
    assert t.endpoint == parse_url(served.url).label and t.model == served.engine.info.id
    # the same request without speculation: identical ids (greedy, exact)
    plain = list(stream_remote(RemoteRequest(url=served.url, prompt="The cat sat on the mat.",
                                             max_tokens=16, extension={"draft_kind": "none"})))
    assert plain[-1].token_ids == done.token_ids


def test_unreported_figures_are_unknown_not_zero(plain_endpoint):
    url, seen = plain_endpoint
    events = list(stream_remote(RemoteRequest(url=url, prompt="Hi", max_tokens=8,
                                              extension={"draft_kind": "full-model"})))
    done = events[-1]
    assert done.finish_reason == "length" and done.text == "".join(PIECES)
    assert done.token_ids == ()  # ids unknown: comparisons use the text
    assert [e.token_id for e in events[:-1]] == [-1] * len(PIECES)
    t = done.timings
    assert t.predicted_n == 4 and t.prompt_n == 7  # from usage
    for name in ("draft_n", "draft_n_accepted", "accept_len_mean", "peak_memory_bytes",
                 "tokens_per_verify", "prompt_ms", "draft_kind", "copy_n_accepted", "cache_n"):
        assert getattr(t, name) is None, name
    # remote figures are their own type, not a local Timings with its ints made None
    assert isinstance(done, RemoteDone) and isinstance(t, RemoteTimings)
    assert not isinstance(done, DoneEvent) and not isinstance(t, Timings)
    assert t.rate_source == "client" and t.predicted_per_second > 0
    assert t.ttft_ms is not None and t.ttft_ms > 0
    # our extension goes only to draftpair endpoints
    assert "draftpair" not in seen[-1] and seen[-1]["stream_options"] == {"include_usage": True}


def test_compare_summary_with_an_endpoint_without_ids(plain_endpoint):
    from app.ui.compare_model import RunResult, summarize

    url, _ = plain_endpoint
    remote = list(stream_remote(RemoteRequest(url=url, prompt="Hi", max_tokens=8)))[-1]
    local = DoneEvent("Hello, world!", (5, 6, 7, 8), "length",
                      Timings(predicted_n=4, predicted_per_second=10.0, peak_memory_bytes=9))
    s = summarize([RunResult("off", 0, local), RunResult("on", 0, remote)])
    assert s is not None and s.compared_by == "text" and s.identical
    assert s.accepted is None and s.acceptance is None and s.extra_memory_bytes is None
    assert s.remote == parse_url(url).label and s.rate_source == "client"


def test_cancel_closes_the_connection_and_stops_the_server(served):
    cancel = threading.Event()
    seen = 0
    for ev in stream_remote(RemoteRequest(url=served.url, prompt="Once upon a time",
                                          max_tokens=1500, extension={"draft_kind": "none"}),
                            cancel=cancel):
        if isinstance(ev, TokenEvent):
            seen += 1
            if seen == 3:
                cancel.set()
    assert ev.finish_reason == "cancelled" and len(ev.token_ids) < 1500
    deadline = time.monotonic() + 20
    while served.engine.status()["running"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert served.engine.records[-1].finish_reason == "cancelled"


def test_bench_remote_rows(served, plain_endpoint, tiny_models, tmp_path):
    from app.bench.report import write_report
    from app.bench.runner import BenchConfig, run_bench
    from app.engine.session import Session

    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "suite.json").write_text(json.dumps({"format": 1, "tasks": [
        {"id": "t1", "kind": "rewrite", "max_tokens": 12,
         "messages": [{"role": "user", "content": "Fix: teh cat sat on teh mat."}]}]}))
    session = Session()
    session.load_target(tiny_models.target)
    config = BenchConfig(kinds=("none",), runs=1, temperatures=(0.0,), peers=False,
                         suite_path=str(tmp_path / "suite"), max_reruns=0,
                         remotes=(served.url, plain_endpoint[0]))
    report = run_bench(config, session=session)
    names = [c.name for c in report.conditions]
    ours, other = (f"remote {parse_url(u).label}" for u in (served.url, plain_endpoint[0]))
    assert names == ["off", ours, other]
    rows = {r["condition"]: r for r in report.summary["rows"]}
    assert rows[ours]["engine"] == "remote" and rows[ours]["decode_tps"] > 0
    # same target, greedy, exact speculation on the server: the same tokens as local plain
    assert rows[ours]["identity_vs_off"]["identical"]
    assert rows[ours]["identity_vs_off"]["compared_by"] == "tokens"
    assert rows[other]["identity_vs_off"]["compared_by"] == "text"
    assert rows[other]["accept_len_mean"] is None
    md = (write_report(report, tmp_path / "out")["md"]).read_text()
    line = next(ln for ln in md.splitlines() if f"| {other}" in ln)
    assert "unknown" in line
