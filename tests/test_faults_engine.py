"""Engine input faults: invalid requests are refused with every bad value named, binary or
empty prompt files, stop strings that fall across token boundaries, cancel at every stage."""

from __future__ import annotations

import math
import threading
from dataclasses import replace

import pytest

from app.cli import main
from app.engine.events import DoneEvent, GenerationRequest, SamplingParams, StatusEvent, TokenEvent
from app.engine.validation import problems, text_problem, validate
from app.errors import DraftPairError


@pytest.fixture(autouse=True)
def _no_reexec(monkeypatch):
    """``main`` may re-execute itself for the BLAS fix; never the test process."""
    monkeypatch.setenv("DRAFTPAIR_NO_BLAS_FIX", "1")


GOOD = GenerationRequest(prompt="Hello there", max_tokens=8)
S = SamplingParams()

BAD = [
    ("empty prompt", replace(GOOD, prompt=""), "prompt is empty"),
    ("blank prompt", replace(GOOD, prompt=" \n\t"), "prompt is empty"),
    ("no prompt", GenerationRequest(), "prompt is empty"),
    ("NUL in prompt", replace(GOOD, prompt="a\x00b"), "binary"),
    ("no messages", GenerationRequest(messages=()), "no messages"),
    ("bad role", GenerationRequest(messages=({"role": "robot", "content": "hi"},)), "role"),
    ("no tokens", GenerationRequest(prompt_tokens=()), "no tokens"),
    ("negative token", GenerationRequest(prompt_tokens=(1, -2)), "whole numbers"),
    ("two prompts", replace(GOOD, prompt_tokens=(1,)), "only one"),
    ("max tokens 0", replace(GOOD, max_tokens=0), "max tokens"),
    ("max tokens negative", replace(GOOD, max_tokens=-3), "max tokens"),
    ("max tokens huge", replace(GOOD, max_tokens=10**12), "at most"),
    ("NaN temperature", replace(GOOD, sampling=replace(S, temperature=math.nan)), "temperature"),
    ("inf temperature", replace(GOOD, sampling=replace(S, temperature=math.inf)), "temperature"),
    ("negative temperature", replace(GOOD, sampling=replace(S, temperature=-0.5)), "temperature"),
    ("top-p 2", replace(GOOD, sampling=replace(S, top_p=2.0)), "top-p"),
    ("top-p 0", replace(GOOD, sampling=replace(S, top_p=0.0)), "top-p"),
    ("top-p NaN", replace(GOOD, sampling=replace(S, top_p=math.nan)), "top-p"),
    ("top-k -3", replace(GOOD, sampling=replace(S, top_k=-3)), "top-k"),
    ("top-k float", replace(GOOD, sampling=replace(S, top_k=2.5)), "top-k"),
    ("min-p 1.5", replace(GOOD, sampling=replace(S, min_p=1.5)), "min-p"),
    ("repetition penalty 0", replace(GOOD, sampling=replace(S, repetition_penalty=0.0)),
     "repetition penalty"),
    ("repetition window 0", replace(GOOD, sampling=replace(S, repetition_context_size=0)),
     "repetition window"),
    ("negative seed", replace(GOOD, sampling=replace(S, seed=-1)), "seed"),
    ("width 0", replace(GOOD, draft_kind="prompt-lookup", draft_width=0), "width"),
    ("width 1000", replace(GOOD, draft_kind="prompt-lookup", draft_width=1000), "width"),
    ("ngram reversed", replace(GOOD, ngram_min=4, ngram_max=2), "n-gram"),
    ("unknown kind", replace(GOOD, draft_kind="magic"), "unknown"),
    ("empty stop", replace(GOOD, stop=("",)), "stop string"),
]


@pytest.mark.parametrize("name,request_,expect", BAD, ids=[b[0] for b in BAD])
def test_invalid_requests_are_named(name, request_, expect):
    found = problems(request_)
    assert found and any(expect in p for p in found), found
    with pytest.raises(DraftPairError) as err:
        validate(request_)
    assert expect in str(err.value) and "Error" not in str(err.value)


def test_valid_requests_pass():
    assert problems(GOOD) == []
    assert problems(replace(GOOD, sampling=SamplingParams(temperature=0.7, top_p=0.9, top_k=40,
                                                          min_p=0.05, seed=3))) == []
    assert problems(GenerationRequest(messages=({"role": "user", "content": "hi"},))) == []
    assert problems(replace(GOOD, draft_kind="prompt-lookup", draft_width=64, stop=("\n",))) == []


def test_all_problems_at_once():
    bad = replace(GOOD, max_tokens=0, sampling=SamplingParams(temperature=math.nan, top_p=2.0,
                                                                top_k=-3))
    assert len(problems(bad)) == 4


def test_prompt_file_text_problems():
    assert "binary" in text_problem(b"\x7fELF\x00\x01", "F")
    assert "empty" in text_problem(b"  \n", "F")
    assert "UTF-8" in text_problem(b"caf\xe9", "F")
    assert text_problem("héllo".encode(), "F") is None


@pytest.mark.parametrize("argv,expect", [
    (["--prompt", "hi", "--temp", "nan"], "temperature"),
    (["--prompt", "hi", "--top-p", "2"], "top-p"),
    (["--prompt", "hi", "--top-k", "-3"], "top-k"),
    (["--prompt", "hi", "--max-tokens", "0"], "max tokens"),
    (["--prompt", "hi", "--min-p", "-1"], "min-p"),
    (["--prompt", "   "], "prompt is empty"),
])
def test_cli_refuses_before_loading(argv, expect, capsys, tmp_path):
    # the model does not exist: the request is judged before anything is loaded
    assert main(["generate", "--model", str(tmp_path / "no-model"), *argv]) == 2
    err = capsys.readouterr().err
    assert expect in err.lower() and "no such folder" not in err and "Traceback" not in err


def test_cli_binary_prompt_file(tmp_path, capsys):
    f = tmp_path / "prompt.bin"
    f.write_bytes(b"\x00\x01\x02 not text")
    assert main(["generate", "--model", str(tmp_path / "none"), "--prompt-file", str(f)]) == 2
    assert "not a text file" in capsys.readouterr().err
    assert main(["generate", "--prompt-file", str(tmp_path / "missing.txt")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.fixture(scope="module")
def session(tiny_models):
    from app.engine.session import Session

    s = Session()
    s.load_target(tiny_models.target)
    s.load_draft(tiny_models.draft)
    return s


def run(session, req, cancel=None):
    events = list(session.generate(req, cancel=cancel))
    done = [e for e in events if isinstance(e, DoneEvent)]
    assert len(done) == 1 and events[-1] is done[0]
    return events, done[0]


@pytest.mark.parametrize("kind", ["none", "prompt-lookup", "full-model"])
def test_stop_string_across_token_boundaries(session, kind):
    req = GenerationRequest(prompt="The cat sat on the mat.", max_tokens=24, draft_kind=kind,
                            chat=False)
    events, plain = run(session, replace(req, draft_kind="none"))
    pieces = [e.text for e in events if isinstance(e, TokenEvent) and e.text]
    assert len(pieces) >= 3, "the tiny model must write a few tokens"
    # the end of one token's text plus the start of the next
    i = next(i for i in range(1, len(pieces)) if len(pieces[i - 1]) and len(pieces[i]))
    stop = pieces[i - 1][-1:] + pieces[i][:1]
    at = plain.text.find(stop)
    _, done = run(session, replace(req, stop=(stop,)))
    assert done.finish_reason == "stop" and done.text == plain.text[:at]


@pytest.mark.parametrize("stage", ["before start", "at prefill", "after first token",
                                   "after three tokens"])
@pytest.mark.parametrize("kind", ["none", "prompt-lookup", "full-model"])
def test_cancel_at_every_stage(session, stage, kind):
    cancel = threading.Event()
    if stage == "before start":
        cancel.set()
    req = GenerationRequest(prompt="Count: 1 2 3 4 5 6 7 8 9", max_tokens=40, draft_kind=kind)
    events = []
    tokens = 0
    for ev in session.generate(req, cancel=cancel):
        events.append(ev)
        if stage == "at prefill" and isinstance(ev, StatusEvent):
            cancel.set()
        if isinstance(ev, TokenEvent) and ev.token_id >= 0:
            tokens += 1
            if (stage == "after first token" and tokens == 1) or tokens == 3:
                cancel.set()
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason == "cancelled", done
    assert done.error is None and len(done.token_ids) <= 3 + 8  # stops within one round
    _, after = run(session, replace(req, max_tokens=4))  # the session still works
    assert after.finish_reason in ("stop", "length")
