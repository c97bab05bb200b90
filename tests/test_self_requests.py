"""Teacher replies to requests the target samples itself: the user-turn prefix, the filter,
real sampling and real greedy replies on a tiny target, the held-out split and resuming."""

from __future__ import annotations

import json

import pytest

from app.demo import self_requests as sr
from app.demo import teacher


@pytest.fixture(scope="module")
def loaded(tiny_models):
    from mlx_lm import load

    return load(str(tiny_models.target))


ASKED = ["How do I bake bread at home?", "What is a good name for a cat?",
         "Can you explain how rain forms?", "Why is the sky blue?",
         "Tell me a short story about a fox.", "How do I fix a flat bike tyre?"]


@pytest.fixture(scope="module")
def asker(tmp_path_factory):
    """A tiny target trained on user turns, so sampling its user turn gives whole requests."""
    from mlx_lm import load

    from tests.builders import make_trained_checkpoint

    texts = [f"<|im_start|>user\n{q}<|im_end|>\n" for q in ASKED] * 6
    folder = make_trained_checkpoint(tmp_path_factory.mktemp("asker") / "m", texts=texts,
                                     steps=400)
    return load(str(folder))


def test_usable_keeps_readable_new_requests_only():
    seen: set[str] = set()
    assert sr.usable("How do I keep basil alive indoors?", seen)
    assert not sr.usable("how do  I keep basil alive INDOORS?", seen)  # same words again
    assert not sr.usable("Hi", seen)  # too short
    assert not sr.usable(" ".join(["word"] * 91), seen)  # a rambling page
    assert not sr.usable("Tell me more <|im_start|> about it", seen)  # template leaked
    assert not sr.usable("Explain \u00e9\u00e8\u00ea\u00eb\u00e0 ce texte \u00e0 moi", seen)
    assert not sr.usable("Explain this text\x07 to me", seen)  # control character
    assert sr.usable("Explain this text to me, line by line.", seen)
    # close to a request the demo drafters are measured on: never trained on
    from app.demo.chat_prompts import CHAT_PROMPTS

    assert all(not sr.usable(p, set()) for p in CHAT_PROMPTS)
    assert not sr.usable("why are oceans salty when rivers aren't?", seen)
    assert sr.usable("Why are lakes sometimes green in summer?", seen)


def test_the_users_words_are_read_back_from_a_prompts_tokens(loaded):
    _, tok = loaded
    text = "How do I keep basil alive indoors?"
    ids = teacher.encode_prompt(tok, [{"role": "user", "content": text}])
    assert sr.request_text(tok, ids) == text


def test_prefix_is_the_chat_template_up_to_the_users_words(loaded):
    _, tok = loaded
    prefix = sr.request_prefix(tok)
    full = tok.apply_chat_template([{"role": "user", "content": "Plant tips?"}],
                                   add_generation_prompt=False, tokenize=False)
    assert tok.decode(prefix) == full[: full.index("Plant tips?")]
    assert tok.decode(prefix).endswith("<|im_start|>user\n")


def test_sampled_requests_are_stored_numbered_and_filtered(asker, tmp_path):
    model, tok = asker
    logs: list[str] = []
    added = sr.sample_requests(model, tok, tmp_path, 2, batch=8, max_tokens=40, log=logs.append)
    stored = sr.load_requests(tmp_path)
    assert len(stored) == added >= 2  # a batch's usable requests are all kept
    # what it learnt users ask (whole, or up to where it ended the turn itself)
    assert all(any(q.startswith(r["text"]) for q in ASKED) for r in stored)
    assert [r["n"] for r in stored] == list(range(added))
    seen: set[str] = set()
    assert all(sr.usable(r["text"], seen) for r in stored)
    assert logs and f"+{added} of" in logs[-1]
    # drawing stops after a bounded number of samples even when few are usable
    drawn = int(logs[-1].split(" of ")[1].split()[0])
    assert 8 <= drawn <= 4 * 8
    # asked for more than it can tell apart: it stops after a bounded number of draws
    more = sr.sample_requests(model, tok, tmp_path, 40, batch=8, max_tokens=40,
                              log=logs.append)
    assert more < 40 and int(logs[-1].split(" of ")[1].split()[0]) <= 4 * 40


def test_requests_are_answered_once_with_one_in_25_held_out(loaded, tmp_path):
    model, tok = loaded
    texts = [f"Question number {i}: what should I cook tonight?" for i in range(26)]
    with open(tmp_path / sr.FILE, "w", encoding="utf-8") as fh:
        for i, t in enumerate(texts):
            fh.write(json.dumps({"n": i, "text": t}) + "\n")
    n, tokens = sr.generate(model, tok, tmp_path, minutes=5, batch=4, max_tokens=5,
                            max_requests=26, log=lambda m: None)
    train, held = teacher.load_records(tmp_path), teacher.load_heldout(tmp_path, with_self=True)
    assert teacher.load_heldout(tmp_path) == []  # the generator's held-out prompts only
    assert n == len(train) == 25 and tokens == sum(len(r["reply_ids"]) for r in train)
    assert [r["index"] for r in held] == [sr.INDEX_BASE + 24]
    for r in train + held:
        i = r["index"] - sr.INDEX_BASE
        assert r["kind"] == "self" and r["id"] == f"self-{i}"
        messages = [{"role": "user", "content": texts[i]}]
        assert r["prompt_ids"] == teacher.encode_prompt(tok, messages)
        assert 1 <= len(r["reply_ids"]) <= 5
    # resuming answers nothing twice and samples nothing past max_requests
    assert sr.generate(model, tok, tmp_path, minutes=5, batch=4, max_tokens=5,
                       max_requests=26, log=lambda m: None) == (0, 0)
    assert len(sr.load_requests(tmp_path)) == 26
    # the prompt generator still continues from its own indices, not after the self ones
    gen = teacher.TeacherGenerator(tmp_path, model, tok, batch=4, max_tokens=3, topk=0,
                                   log=lambda m: None)
    assert gen.generate(max_records=2)[0] == 2
    generated = [r["index"] for r in teacher.load_records(tmp_path) if r["kind"] != "self"]
    assert len(generated) == 2 and max(generated) < 1000


def test_new_requests_are_numbered_after_restored_replies_and_not_asked_again(asker, tmp_path):
    """Replies restored from the archive come without the requests file: new requests must
    not take their numbers (they would count as answered and never be), nor repeat their
    words (the same prompt could land in training and held out)."""
    model, tok = asker
    (tmp_path / "shards").mkdir()
    asked = "How do I fix a flat bike tyre?"  # what this model asks most
    restored = {"index": sr.INDEX_BASE + 40, "id": "self-40", "kind": "self",
                "prompt_ids": teacher.encode_prompt(tok, [{"role": "user", "content": asked}]),
                "reply_ids": [3], "finish": "stop"}
    (tmp_path / "shards" / "restored.jsonl").write_text(json.dumps(restored) + "\n")
    sr.sample_requests(model, tok, tmp_path, 2, batch=8, max_tokens=40, log=lambda m: None)
    got = sr.load_requests(tmp_path)
    assert got and all(r["n"] > 40 for r in got)
    assert all(sr.normalised(r["text"]) != sr.normalised(asked) for r in got)


@pytest.mark.parametrize("argv, said", [
    (["demo", "teacher-self", "--minutes", "0"], "must be positive"),
    (["demo", "teacher-self", "--batch", "0"], "must be positive"),
    (["demo", "mtp-train", "--chat-weight", "-1"], "--chat-weight cannot be negative"),
    (["demo", "mtp-train", "--new-head-ids"], "--new-head-ids goes with --init-from"),
])
def test_bad_options_are_refused_in_one_line_before_any_work(argv, said, tmp_path, capsys):
    from app.cli import main

    assert main([*argv, "--workdir", str(tmp_path / "w")]) != 0
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "w").exists()  # nothing was started
