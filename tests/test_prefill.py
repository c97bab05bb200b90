"""Prefill in steps (progress, Stop within one step) and context limits (refuse before any
work, or drop the oldest turns by the user's choice), on real tiny MLX models."""

from __future__ import annotations

import threading

import mlx.core as mx
import pytest

from app.engine import context, prefill
from app.engine.events import (
    DoneEvent,
    GenerationRequest,
    NoticeEvent,
    PrefillEvent,
    StatusEvent,
    TokenEvent,
)
from app.engine.models import load_model, make_cache
from app.engine.session import Session
from app.errors import DraftPairError
from tests.builders import make_checkpoint

LONG = ("The quick brown fox jumps over the lazy dog. " * 40).strip()


@pytest.fixture(scope="module")
def small_ctx(tmp_path_factory):
    """A tiny llama that declares a 512-token context."""
    return make_checkpoint(tmp_path_factory.mktemp("ctx") / "m", max_position_embeddings=512)


@pytest.fixture(scope="module")
def session(tiny_target) -> Session:
    s = Session()
    s.load_target(tiny_target)
    return s


def test_chunk_size_follows_the_rate():
    assert prefill.next_size(1000.0, target_s=0.25) == 192  # 250 tokens, a multiple of 64
    assert prefill.next_size(1000.0) == 448  # half a second
    assert prefill.next_size(10.0) == prefill.MIN_CHUNK
    assert prefill.next_size(1e9) == prefill.MAX_CHUNK


def test_chunks_read_everything_and_match_one_pass(tiny_target):
    m = load_model(tiny_target)
    ids = [(7 * i) % 300 + 3 for i in range(500)]
    cache = make_cache(m)
    sizes: list[int] = []
    last: list[mx.array] = []

    def feed(part: list[int]) -> list[mx.array]:
        sizes.append(len(part))
        last[:] = [m.model(mx.array(part)[None], cache=cache)[0, -1]]
        return [*last, *prefill.cache_arrays(cache)]

    events = list(prefill.chunked(feed, ids, first=16, max_chunk=64, boundary=499))
    assert sum(sizes) == 500 and max(sizes) <= 64 and sizes[0] == 16
    assert sizes[-1] == 1  # the boundary: a chunk ends just before the last token
    assert [e.done for e in events] == list(_cumsum(sizes))
    assert events[-1].done == events[-1].total == 500 and events[-1].tokens_per_s > 0
    assert cache[0].offset == 500
    want = m.model(mx.array(ids)[None], cache=make_cache(m))[0, -1]
    assert mx.allclose(last[0], want, atol=1e-4).item()


def _cumsum(xs):
    total = 0
    for x in xs:
        total += x
        yield total


def test_cancel_stops_before_the_next_chunk(tiny_target):
    m = load_model(tiny_target)
    cache = make_cache(m)
    cancel = threading.Event()
    fed = []

    def feed(part):
        fed.append(len(part))
        return [m.model(mx.array(part)[None], cache=cache)]

    for p in prefill.chunked(feed, list(range(3, 1003)), cancel, first=32, max_chunk=32):
        if p.chunks == 3:
            cancel.set()
    assert len(fed) == 3 and cache[0].offset == 96


def test_stop_during_a_long_prefill_returns_within_one_chunk(session):
    cancel = threading.Event()
    prompt = [(5 * i) % 300 + 3 for i in range(1800)]
    events = []
    for ev in session.generate(GenerationRequest(prompt_tokens=tuple(prompt), max_tokens=8),
                               cancel=cancel):
        events.append(ev)
        if isinstance(ev, PrefillEvent):
            cancel.set()
    done = events[-1]
    progress = [e for e in events if isinstance(e, PrefillEvent)]
    assert isinstance(done, DoneEvent) and done.finish_reason == "cancelled"
    assert len(progress) == 1 and progress[0].done < progress[0].total == 1800
    assert done.timings.prompt_n == progress[0].done  # nothing read after the Stop
    assert not [e for e in events if isinstance(e, TokenEvent)]


def test_a_prompt_over_the_context_is_refused_before_any_work(small_ctx):
    s = Session()
    s.load_target(small_ctx)
    assert s.context_length() == 512
    events = list(s.generate(GenerationRequest(prompt=LONG, chat=False)))
    done = events[-1]
    assert done.finish_reason == "error"
    assert "512" in done.error and "tokens" in done.error
    assert not [e for e in events if isinstance(e, (PrefillEvent, StatusEvent))]
    # a prompt that fits with a reply that would not: the reply is capped, and it says so
    prompt = tuple(3 + i % 300 for i in range(500))  # 500 ids the tiny vocabulary holds
    events = list(s.generate(GenerationRequest(prompt_tokens=prompt, max_tokens=64)))
    notes = [e for e in events if isinstance(e, NoticeEvent) and e.code == "context-full"]
    assert notes and events[-1].finish_reason != "error"
    assert len(events[-1].token_ids) <= 12


def test_drop_oldest_keeps_the_system_prompt_and_the_latest_turn(small_ctx):
    s = Session()
    s.load_target(small_ctx)
    msgs = [{"role": "system", "content": "You fix typos."}]
    for i in range(8):
        msgs += [{"role": "user", "content": f"Turn {i}: " + LONG[:300]},
                 {"role": "assistant", "content": f"Reply {i}: " + LONG[:200]}]
    msgs.append({"role": "user", "content": "Last question?"})
    tok = s.target.tokenizer

    def encode(m):
        return list(tok.apply_chat_template(m, add_generation_prompt=True))

    with pytest.raises(DraftPairError, match="512"):
        context.fit_messages(msgs, encode, 512, policy="refuse")
    tokens, dropped = context.fit_messages(msgs, encode, 512, policy="drop-oldest", reserve=32)
    assert dropped > 0 and len(tokens) <= 512 - 32
    kept = msgs[:1] + msgs[1 + dropped:]
    assert tokens == encode(kept)
    assert kept[0]["role"] == "system" and kept[1]["role"] == "user"
    assert kept[-1]["content"] == "Last question?"
    # through the session: the request runs and says what it left out
    events = list(s.generate(GenerationRequest(messages=tuple(msgs), max_tokens=4,
                                               context_policy="drop-oldest")))
    assert events[-1].finish_reason != "error", events[-1].error
    assert any(isinstance(e, NoticeEvent) and e.code == "context-trimmed" for e in events)
    refused = list(s.generate(GenerationRequest(messages=tuple(msgs), max_tokens=4)))
    assert refused[-1].finish_reason == "error" and "drop the oldest" in refused[-1].error


def test_admission_gives_the_tokens_and_the_limit_generate_uses(small_ctx):
    s = Session()
    s.load_target(small_ctx)
    msgs = [{"role": "system", "content": "You fix typos."}]
    for i in range(8):
        msgs += [{"role": "user", "content": f"Turn {i}: " + LONG[:300]},
                 {"role": "assistant", "content": f"Reply {i}: " + LONG[:200]}]
    msgs.append({"role": "user", "content": "Last question?"})
    req = GenerationRequest(messages=tuple(msgs), max_tokens=4, context_policy="drop-oldest")
    admitted = s.admit(req)
    assert admitted.limit == 512 and admitted.dropped_turns > 0
    assert admitted.reply_room == 512 - len(admitted.tokens) > 0
    assert s.encode(req) == list(admitted.tokens)
    done = list(s.generate(req))[-1]
    assert done.timings.prompt_n == len(admitted.tokens)
    with pytest.raises(DraftPairError, match="512"):
        s.admit(GenerationRequest(prompt=LONG, chat=False))
    with pytest.raises(DraftPairError, match="empty"):
        s.admit(GenerationRequest(prompt_tokens=()))


def test_context_length_from_configs():
    assert context.context_length({"max_position_embeddings": 8192}) == 8192
    nested = {"model_type": "qwen3_5", "text_config": {"max_position_embeddings": 262144}}
    assert context.context_length(nested) == 262144
    assert context.context_length({"n_positions": 1024}) == 1024
    assert context.context_length({}, tokenizer_max=4096) == 4096
    assert context.context_length({}, tokenizer_max=10**30) is None
    assert context.sliding_window({"text_config": {"sliding_window": 512}}) == 512
    assert context.sliding_window({"sliding_window": None}) is None
