"""Prompt-cache reuse across chat turns on real tiny MLX models: the same greedy output with
and without reuse for every draft kind and cache kind (KV, sliding window, recurrent, hybrid),
edits and regenerations rewind to the common prefix, the store stays within its byte budget
and reports its size."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest

from app.engine.events import (
    DoneEvent,
    GenerationRequest,
    MemoryEvent,
    PrefillEvent,
)
from app.engine.models import load_model, make_cache
from app.engine.prompt_cache import CachedState, Conversation, PromptCache, common_prefix
from app.engine.session import Session
from tests.builders import _token_id, make_checkpoint, make_trained_checkpoint, write_tokenizer
from tests.builders_hybrid import make_family_checkpoint

TURNS = ["Hello! How can you help?", "The cat sat on the mat. The dog sat on the log.",
         "def add(a, b):\n    return a + b\n", "Numbers: 0 1 2 3 4 5"]

SMALL = dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)


QWEN3 = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
         "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "tie_word_embeddings": True, "torch_dtype": "float32", "max_position_embeddings": 4096}


def make_qwen3(folder: Path, seed: int = 0) -> Path:
    from mlx_lm.models import qwen3
    from mlx_lm.utils import save_config, save_model

    vocab = write_tokenizer(folder)
    config = {**QWEN3, "vocab_size": vocab, "eos_token_id": _token_id(folder, "<|im_end|>")}
    mx.random.seed(seed)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(dict(config)))
    mx.eval(model.parameters())
    save_model(folder, model)
    save_config(config, config_path=folder / "config.json")
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("reuse-models")
    out = {
        "llama": make_trained_checkpoint(root / "llama", seed=1, steps=60),
        "draft": make_trained_checkpoint(root / "draft", seed=2, steps=30, **SMALL),
    }
    out["qwen3"] = make_qwen3(root / "qwen3")
    # recurrent (Mamba-2), hybrid (Gated DeltaNet + attention), sliding window of 8
    for fam in ("mamba2", "qwen3_5", "gemma3_text"):
        out[fam] = make_family_checkpoint(root / fam, fam)
    return out


@pytest.fixture(scope="module")
def sessions(models) -> dict[str, Session]:
    out = {}
    for fam in ("llama", "qwen3", "mamba2", "qwen3_5", "gemma3_text"):
        s = Session()
        s.load_target(models[fam])
        s.load_draft(models["draft"])
        out[fam] = s
    return out


def ask(session: Session, messages: list[dict], **kw) -> tuple[DoneEvent, list]:
    events = list(session.generate(GenerationRequest(messages=tuple(messages), **kw)))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done
    return done, events


def converse(session: Session, turns: list[str], **kw) -> list[DoneEvent]:
    msgs: list[dict] = []
    out = []
    for text in turns:
        msgs.append({"role": "user", "content": text})
        done, _ = ask(session, msgs, **kw)
        msgs.append({"role": "assistant", "content": done.text})
        out.append(done)
    return out


@pytest.mark.parametrize("family", ["llama", "qwen3", "mamba2", "qwen3_5", "gemma3_text"])
@pytest.mark.parametrize("kind", ["none", "prompt-lookup", "full-model"])
def test_reuse_gives_identical_output(sessions, family, kind):
    s = sessions[family]
    s.prompt_cache.clear()
    kw = dict(max_tokens=24, draft_kind=kind, system_prompt="Be brief.")
    fresh = converse(s, TURNS, **kw)
    assert len(s.prompt_cache) == 0  # reuse off keeps nothing
    kept = converse(s, TURNS, reuse_cache=True, **kw)
    for a, b in zip(fresh, kept, strict=True):
        assert b.token_ids == a.token_ids
        assert b.timings.prompt_n + b.timings.cache_n == a.timings.prompt_n
        assert a.timings.cache_n == 0
    assert kept[0].timings.cache_n == 0
    # every later turn starts after at least the previous turn's whole prompt
    for prev, cur in zip(fresh, kept[1:], strict=False):
        assert cur.timings.cache_n >= prev.timings.prompt_n - 1
    assert kept[-1].timings.prompt_n < fresh[-1].timings.prompt_n / 2
    assert len(s.prompt_cache) == 1 and s.prompt_cache.nbytes > 0
    if kind == "full-model":  # speculation really ran (and rolled back) on the kept caches
        assert all(d.timings.fallback is None for d in kept)
        assert sum(d.timings.draft_n - d.timings.draft_n_accepted for d in kept) > 0
    s.prompt_cache.clear()


@pytest.mark.parametrize("family", ["llama", "mamba2", "qwen3_5", "gemma3_text"])
def test_edit_and_regenerate_rewind_to_the_common_prefix(sessions, family):
    s = sessions[family]
    s.prompt_cache.clear()
    kw = dict(max_tokens=16, draft_kind="full-model" if family == "llama" else "none")
    msgs = [{"role": "user", "content": TURNS[0]}]
    first, _ = ask(s, msgs, reuse_cache=True, **kw)
    msgs += [{"role": "assistant", "content": first.text}, {"role": "user", "content": TURNS[1]}]
    second, _ = ask(s, msgs, reuse_cache=True, **kw)
    total = second.timings.prompt_n + second.timings.cache_n
    # regenerate the last reply: everything but the prompt's last token is reused
    again, _ = ask(s, msgs, reuse_cache=True, **kw)
    assert again.token_ids == second.token_ids
    assert (again.timings.cache_n, again.timings.prompt_n) == (total - 1, 1)
    # edit a message: only the part before the edit is reused (the first message: the
    # template's header; the second: the whole first turn, a snapshot boundary for recurrent
    # caches, which can only go back to one)
    tok = s.target.tokenizer
    before = tok.apply_chat_template(msgs, add_generation_prompt=True)
    for index, text in ((2, "Numbers: 0 1 2"), (0, "Hello! Who are you?")):
        edited = [*msgs[:index], {"role": "user", "content": text}, *msgs[index + 1:]]
        after = tok.apply_chat_template(edited, add_generation_prompt=True)
        lcp = common_prefix(before, after)
        kept, _ = ask(s, edited, reuse_cache=True, **kw)
        fresh, _ = ask(s, edited, **kw)
        assert kept.token_ids == fresh.token_ids
        assert kept.timings.cache_n + kept.timings.prompt_n == len(after)
        if family == "llama":  # KV trims: exactly the common prefix (the window wraps here)
            assert kept.timings.cache_n == lcp
        else:
            assert kept.timings.cache_n <= lcp
            assert kept.timings.cache_n > 0 or index == 0
        before = after
        msgs = edited
    s.prompt_cache.clear()


def test_snapshot_restore_equals_a_fresh_prefill(models):
    """A recurrent cache rewound to a snapshot continues exactly like one that read only
    that prefix."""
    m = load_model(models["mamba2"])
    ids = list(range(5, 45))
    state = CachedState([], make_cache(m))
    m.model(mx.array(ids[:20])[None], cache=state.cache)
    state.tokens = ids[:20]
    state.snapshot()
    m.model(mx.array(ids[20:])[None], cache=state.cache)
    state.tokens = ids
    assert state.rewind(30) == 20  # no snapshot at 30: back to the one at 20
    got = m.model(mx.array(ids[20:25])[None], cache=state.cache)
    fresh = make_cache(m)
    want = m.model(mx.array(ids[:25])[None], cache=fresh)[:, 20:]
    assert mx.allclose(got, want, atol=1e-4).item()
    assert state.rewind(10) == 0  # before every snapshot: nothing usable


def test_store_is_bounded_by_bytes_and_drops_under_pressure(models):
    m = load_model(models["llama"])

    def entry(n: int) -> Conversation:
        cache = make_cache(m)
        mx.eval(m.model(mx.array(list(range(1, n + 1)))[None], cache=cache))
        return Conversation(("k",), CachedState(list(range(1, n + 1)), cache))

    one = entry(300).nbytes()
    store = PromptCache(max_bytes=int(2.5 * one))
    for _ in range(4):
        store.put(entry(300))
    assert len(store) == 2 and store.nbytes <= store.max_bytes  # oldest dropped first
    assert store.relieve(0.5) == 0
    assert store.relieve(0.95) == 1 and len(store) == 1  # pressure: keep only the latest
    assert store.relieve(0.99) == 1 and len(store) == 0
    # the longest common prefix wins, and an entry of another model is never used
    store = PromptCache()
    store.put(entry(40))
    store.put(entry(80))
    got = store.take(("k",), list(range(1, 61)) + [999])
    assert got.cache_n == 60 and len(store) == 1
    assert store.take(("other",), list(range(1, 61))).conversation is None


def test_memory_samples_report_the_cache_size(sessions):
    s = sessions["llama"]
    s.prompt_cache.clear()
    msgs = [{"role": "user", "content": TURNS[0]}]
    ask(s, msgs, reuse_cache=True, max_tokens=8)
    kept = s.prompt_cache.nbytes
    msgs += [{"role": "assistant", "content": "Hi."}, {"role": "user", "content": TURNS[1]}]
    _, events = ask(s, msgs, reuse_cache=True, max_tokens=8, memory_interval_s=0.0)
    sizes = [e.sample.prompt_cache_bytes for e in events if isinstance(e, MemoryEvent)]
    assert sizes and min(sizes) >= kept > 0
    prefills = [e for e in events if isinstance(e, PrefillEvent)]
    assert prefills and all(e.cache_n > 0 for e in prefills)
    assert prefills[-1].done == prefills[-1].total
    s.prompt_cache.clear()


def test_new_model_or_draft_drops_kept_states(models):
    s = Session()
    s.load_target(models["llama"])
    ask(s, [{"role": "user", "content": TURNS[0]}], reuse_cache=True, max_tokens=4)
    assert len(s.prompt_cache) == 1
    s.load_draft(models["draft"])
    assert len(s.prompt_cache) == 0


def test_plain_checkpoint_builder_still_matches(tmp_path):
    # the tiny llama of tests.builders declares its context: reuse code reads it
    folder = make_checkpoint(tmp_path / "m", max_position_embeddings=512)
    s = Session()
    s.load_target(folder)
    assert s.context_length() == 512


@pytest.mark.parametrize("keyed", [True, False])
def test_two_chats_with_one_system_prompt_keep_their_own_states(sessions, keyed):
    s = sessions["llama"]
    s.prompt_cache.clear()
    kw = dict(max_tokens=8, reuse_cache=True, system_prompt="You are a helpful assistant.")
    a = [{"role": "user", "content": TURNS[1]}]
    b = [{"role": "user", "content": TURNS[2]}]
    a1, _ = ask(s, a, conversation="a" if keyed else None, **kw)
    b1, _ = ask(s, b, conversation="b" if keyed else None, **kw)
    assert b1.timings.cache_n > 0  # the shared system prompt is reused...
    a += [{"role": "assistant", "content": a1.text}, {"role": "user", "content": TURNS[3]}]
    a2, _ = ask(s, a, conversation="a" if keyed else None, **kw)
    # ...without destroying chat a's state: its second turn reuses its whole first prompt
    assert a2.timings.cache_n >= a1.timings.prompt_n - 1
    fresh, _ = ask(s, a, max_tokens=8, system_prompt="You are a helpful assistant.")
    assert a2.token_ids == fresh.token_ids
    assert len(s.prompt_cache) == 2
    s.prompt_cache.clear()
