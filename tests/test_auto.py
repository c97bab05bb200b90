"""Auto speculation end to end: every drafter follows the reply, the reply stays exact."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from app import kinds
from app.engine import taps as taps_mod
from app.engine.auto_evidence import Evidence
from app.engine.calibration import CalibrationStore, new_table
from app.engine.events import DoneEvent, GenerationRequest, NoticeEvent, SamplingParams
from app.engine.lease import union
from app.engine.models import make_cache
from app.engine.session import Session
from tests.builders import make_trained_checkpoint
from tests.demo_gate import needs_demo
from tests.test_engine import _chi2, _chi2_sf, _exact_sequence_probs

AUTO = kinds.default_choice()  # the kind the app starts with is auto


def test_auto_is_the_default_choice_and_combines():
    plugin = kinds.get(AUTO)
    assert plugin.combines and plugin.proposes
    assert not kinds.get(kinds.normalize("prompt-lookup")).default_choice


# -- a tiny pair: the distribution stays exact ------------------------------------------


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("auto_models")
    return {
        "target": make_trained_checkpoint(root / "target", seed=1, steps=150),
        "weak": make_trained_checkpoint(root / "weak", seed=3, hidden_size=32, num_layers=1,
                                        steps=25),
    }


def flat_session(pair: dict[str, Path]) -> Session:
    """The tiny pair with a GPU-like table: verifying up to 17 tokens costs one step, so auto
    drafts at every step it can and its rounds are what the test exercises."""
    s = Session(calibrations=CalibrationStore(None))
    s.load_target(pair["target"])
    s.load_draft(pair["weak"])
    assert s.target is not None
    s.calibration = new_table(s.target.path, {}, [0], [[1, 17]], [[10.0, 10.0]], 0.0)
    return s


def _generate(s: Session, **kw) -> tuple[DoneEvent, list]:
    events = list(s.generate(GenerationRequest(**{"chat": False, **kw})))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done.error
    return done, events


def test_auto_names_what_it_loaded_and_what_it_left_out(pair):
    s = flat_session(pair)
    done, events = _generate(s, prompt="The cat sat on", max_tokens=16, draft_kind=AUTO)
    notice = next(e for e in events if isinstance(e, NoticeEvent) and e.code == AUTO)
    assert "Prompt lookup" in notice.message and "Draft model" in notice.message
    assert "left out" in notice.message  # the tiny llama has no MTP head nor DFlash drafter
    left = done.timings.sources_left_out
    assert {"mtp", "dflash"} <= set(left) and all(left.values())
    shares = done.timings.sources
    assert {"prompt-lookup", "full-model", "plain"} <= set(shares)
    assert not set(shares) & set(left)
    # every kind that proposes, auto aside, was either loaded or left out with its reason
    assert set(shares) | set(left) == {p.name for p in kinds.drafting()} - {AUTO} | {"plain"}
    rounds = sum(v["rounds"] for k, v in shares.items())
    assert rounds == done.timings.verify_passes  # every step is a round of one source or plain
    assert done.timings.draft_kind == AUTO


def test_what_auto_learnt_carries_to_the_next_request_of_the_chat(pair):
    s = flat_session(pair)
    _generate(s, prompt="The cat sat on", max_tokens=16, draft_kind=AUTO, conversation="c1")
    learnt = s.auto_memory.for_chat("c1")
    first = learnt["full-model"].rounds
    assert first > 0  # the draft model's rounds, kept for the chat
    _generate(s, prompt="The cat sat on the mat", max_tokens=16, draft_kind=AUTO,
              conversation="c1")
    assert s.auto_memory.for_chat("c1") is learnt  # the same evidence, carried on
    assert learnt["full-model"].rounds != first
    assert s.auto_memory.for_chat("c2") == {}  # another chat starts from the pair's record


def test_every_request_adds_to_the_pairs_record_and_a_new_draft_clears_it(pair):
    s = flat_session(pair)
    done, _ = _generate(s, prompt="The cat sat on", max_tokens=16, draft_kind=AUTO)
    record = s.auto_memory.history(SamplingParams()).evidence
    ran = {k for k, v in done.timings.sources.items() if v["rounds"] and k != "plain"}
    assert ran and ran <= set(record)  # a request outside any chat is remembered too
    before = record["full-model"].rounds
    _generate(s, prompt="Once upon a time", max_tokens=16, draft_kind=AUTO, conversation="x")
    assert record["full-model"].rounds != before
    s.load_draft(pair["weak"])  # another draft: what the old one did says nothing of it
    assert "full-model" not in s.auto_memory.history(SamplingParams()).evidence


def test_greedy_auto_is_identical_to_plain(pair):
    s = flat_session(pair)
    for prompt in ["The cat sat on", "Once upon a time", "the the the the the"]:
        plain, _ = _generate(s, prompt=prompt, max_tokens=24, draft_kind=kinds.OFF)
        auto, _ = _generate(s, prompt=prompt, max_tokens=24, draft_kind=AUTO)
        assert auto.token_ids == plain.token_ids
        assert auto.timings.draft_rounds > 0


def test_sampled_auto_keeps_the_target_distribution(pair):
    """At temperature 2 every round is verified by its own source's rule (rejection sampling
    for the draft model, sample-match for copies): the sequences follow the target's own
    distribution, whichever source proposed."""
    s = flat_session(pair)
    assert s.target is not None
    prompt_ids = s.target.tokenizer.encode("The dog sat")
    sampling = SamplingParams(temperature=2.0, top_k=3)
    length, n = 3, 1200
    exact = _exact_sequence_probs(s.target, prompt_ids, sampling, length)
    counts: Counter = Counter()
    by_source: Counter = Counter()
    for seed in range(n):
        done, _ = _generate(s, prompt_tokens=tuple(prompt_ids), draft_kind=AUTO,
                            max_tokens=length, memory_interval_s=1e9,
                            sampling=SamplingParams(temperature=2.0, top_k=3, seed=seed))
        counts[tuple(done.token_ids)] += 1
        by_source.update(r.source for r in done.rounds)
    stat, df = _chi2(counts, exact, n)
    assert _chi2_sf(stat, df) > 1e-3, (stat, df)
    assert by_source["full-model"] > 100, by_source  # the draft model's rounds were tested


def test_auto_counts_what_each_drafter_must_catch_up_on(pair, monkeypatch):
    """What the policy prices as a drafter's catch-up is what the drafter really has left to
    feed: the draft model holds the tokens it sat out (copies' rounds, plain steps) and feeds
    them at its next proposal; the policy's count of them matches, step by step."""
    from app.engine.auto_source import AutoSource

    seen: list[tuple[int, int]] = []
    next_pick = AutoSource.next

    def watched(self: AutoSource, committed: list[int], remaining: int):
        pending = self.members["full-model"].drafter.pending  # type: ignore[attr-defined]
        seen.append((self.auto.missed["full-model"], len(pending)))
        return next_pick(self, committed, remaining)

    monkeypatch.setattr(AutoSource, "next", watched)
    s = flat_session(pair)
    assert s.target is not None  # a CPU-like table: verifying 16 proposals costs 3 steps
    s.calibration = new_table(s.target.path, {}, [0], [[1, 17]], [[10.0, 30.0]], 0.0)
    weak = Evidence(seen=30.0, seen_hits=3.0, reached=[30.0], hits=[3.0])
    s.auto_memory.for_chat("c")["full-model"] = weak  # the chat found it seldom right
    done, _ = _generate(s, prompt="The cat sat on", max_tokens=60, draft_kind=AUTO,
                        conversation="c")
    shares = done.timings.sources
    assert shares["plain"]["rounds"] > 0 and shares["full-model"]["rounds"] > 0  # probes
    assert any(missed > 0 for missed, _ in seen)  # it sat out some steps
    # it feeds its own last token (and an accepted round's last proposal) besides them
    assert all(missed + 1 <= pending <= missed + 2 for missed, pending in seen), seen


# -- the demo pair: every hidden-state drafter gets every row -----------------------------


def _demo_ready() -> bool:
    from app.demo.mtp_paths import shipped_head_available
    from app.demo.target import demo_target_ready

    return demo_target_ready() and shipped_head_available()


@needs_demo(_demo_ready(), "The demo target or the shipped MTP head")
def test_every_drafter_follows_the_reply_whoever_proposes(monkeypatch):
    """The crux of combining drafters: the MTP head and DFlash read one target row per
    position. Each must receive exactly the target's row for every position, in order, at
    every step — rounds of prompt lookup, of the draft model, of the other hidden-state
    drafter and plain steps included — or its next proposal reads the wrong state."""
    from app.demo.builtins import register_demo_models
    from app.engine.drafters.base import Drafter

    register_demo_models()
    s = Session()
    s.load_target("demo")
    s.load_draft("demo-draft")
    received: dict[int, list] = {}  # id(drafter) -> [(drafter, Hidden), ...]
    checks: list[tuple[str, int, int]] = []  # (kind, rows so far, positions fed)

    def spy(cls: type[Drafter]) -> None:
        prefill, observe = cls.prefill, cls.observe

        def on_prefill(self, tokens, hidden):
            received.setdefault(id(self), []).append((self, hidden))
            return prefill(self, tokens, hidden)

        def on_observe(self, committed, proposal, accepted, new_tokens, hidden=None):
            parts = received.setdefault(id(self), [])
            parts.append((self, hidden))
            n = sum(h.n for _, h in parts if h is not None)
            checks.append((self.kind, n, len(committed) - 1))  # the newest token is pending
            return observe(self, committed, proposal, accepted, new_tokens, hidden)

        monkeypatch.setattr(cls, "prefill", on_prefill)
        monkeypatch.setattr(cls, "observe", on_observe)

    from app.engine.drafters.dflash import DFlashDrafter
    from app.engine.drafters.eagle3 import Eagle3Drafter
    from app.engine.drafters.mtp import MTPDrafter

    spy(MTPDrafter)
    spy(DFlashDrafter)
    spy(Eagle3Drafter)
    prompt = ("Copy this list, then add one fruit: apples, pears, plums, cherries, apples, "
              "pears, plums, cherries.")
    plain, _ = _generate(s, prompt=prompt, chat=True, max_tokens=48, draft_kind=kinds.OFF)
    received.clear()
    checks.clear()
    done, _ = _generate(s, prompt=prompt, chat=True, max_tokens=48, draft_kind=AUTO)
    assert done.token_ids == plain.token_ids
    shares = done.timings.sources
    assert {"mtp", "dflash"} <= set(shares)
    chosen = {k for k, v in shares.items() if v["rounds"]}
    assert len(chosen) >= 2, shares  # the tap drafters also saw steps they did not propose

    kinds_seen = {k for k, _, _ in checks}
    assert kinds_seen == {"mtp", "dflash", "eagle3"}  # the demo's three layer-reading drafters
    bad = [(k, n, fed) for k, n, fed in checks if n != fed]
    assert not bad, bad[:5]
    steps = Counter(k for k, _, _ in checks)
    # each saw every step, not just its own
    assert steps["mtp"] == steps["dflash"] == steps["eagle3"]
    assert steps["mtp"] > shares["mtp"]["rounds"] and steps["dflash"] > shares["dflash"]["rounds"]

    # and the rows are the target's own, position by position
    assert s.target is not None
    committed = [*s.encode(GenerationRequest(prompt=prompt, chat=True)), *done.token_ids]
    every = None  # each drafter gets the rows all of them read, in one pass
    for parts in received.values():
        every = union(every, parts[0][0].taps)
    for parts in received.values():
        drafter = parts[0][0]
        rows = [h for _, h in parts if h is not None and h.n]
        n = sum(h.n for h in rows)
        ref_logits, ref = taps_mod.forward(s.target.model, mx.array(committed[:n]),
                                           make_cache(s.target), every)
        assert ref is not None
        got = taps_mod.Hidden.concat(rows)
        for a, b in zip(got.arrays(), ref.arrays(), strict=True):
            a_np = np.array(a.astype(mx.float32))
            b_np = np.array(b.astype(mx.float32))
            assert a_np.shape == b_np.shape
            scale = float(np.abs(b_np).max())
            assert float(np.abs(a_np - b_np).max()) <= 0.05 * scale, drafter.kind



@needs_demo(_demo_ready(), "The demo target or the shipped MTP head")
def test_cheap_drafters_are_scored_beside_rounds_they_do_not_propose(monkeypatch):
    """The MTP head and EAGLE-3 propose one token for a drafting step's cost: auto asks them
    beside other sources' rounds and plain steps, while their evidence is thin, and scores the
    token against the committed one. A peek must read the head's real state for the newest
    position (a head fed the wrong rows is almost never right), leave the reply exact, and
    stop once the source has seen its rounds."""
    from app.demo.builtins import register_demo_models
    from app.engine.auto_policy import PEEK_SEEN, AutoPolicy
    from app.engine.auto_source import AutoSource

    register_demo_models()
    s = Session()
    s.load_target("demo")
    s.load_draft("demo-draft")
    peeks: list[tuple[str, bool]] = []
    observe_peek = AutoPolicy.observe_peek

    def spy(self: AutoPolicy, source: str, hit: bool) -> None:
        peeks.append((source, hit))
        observe_peek(self, source, hit)

    monkeypatch.setattr(AutoPolicy, "observe_peek", spy)
    beside_copies: list[str] = []
    next_pick = AutoSource.next

    def watched(self: AutoSource, committed: list[int], remaining: int):
        pick = next_pick(self, committed, remaining)
        if pick is not None and pick.copied and self.auto.to_peek(["mtp", "eagle3"], None):
            beside_copies.append(pick.source if self.peeked else "")  # wanted: were they asked?
        return pick

    monkeypatch.setattr(AutoSource, "next", watched)
    prompt = "Write a short Python function that returns the sum of the squares of a list."
    plain, _ = _generate(s, prompt=prompt, chat=True, max_tokens=64, draft_kind=kinds.OFF)
    done, _ = _generate(s, prompt=prompt, chat=True, max_tokens=64, draft_kind=AUTO,
                        conversation="code")
    assert done.token_ids == plain.token_ids
    asked = Counter(name for name, _ in peeks)
    assert asked["mtp"] > 0 and asked["eagle3"] > 0, asked
    assert set(asked) <= {"mtp", "eagle3"}  # model drafters that need a pass are not peeked
    assert all(n <= PEEK_SEEN + 1 for n in asked.values()), asked  # only while thin
    hits = sum(hit for name, hit in peeks if name == "mtp")
    assert hits >= 0.3 * asked["mtp"], peeks  # the head's real prediction, not noise

    # where the text repeats, a drafter is right far more often than where it is chosen: a
    # copy's step does not score it (its evidence is still thin: it would have been asked)
    peeks.clear()
    listing = "apples, pears, plums, cherries, figs, " * 6
    plain, _ = _generate(s, prompt=listing, max_tokens=24, draft_kind=kinds.OFF)
    done, _ = _generate(s, prompt=listing, max_tokens=24, draft_kind=AUTO, conversation="list")
    assert done.token_ids == plain.token_ids
    assert beside_copies and not any(beside_copies), beside_copies
