"""Kept conversations follow the chat whatever the draft kind, on real tiny MLX models.

A chat whose turns use an MTP head or a DFlash drafter, or switch to one from another kind,
reads only each new turn's tokens: the target's cache is kept, and the hidden-state drafter
rebuilds its own state from the target rows kept with the conversation. Each turn is checked
against the same turn in a session that keeps nothing: the same greedy reply, the same
proposals from the drafter (its rebuilt state is the state a full read gives), and read +
reused = what the fresh turn read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.drafters.dflash import DFlashDrafter
from app.engine.drafters.mtp import MTPDrafter
from app.engine.events import DoneEvent, GenerationRequest
from app.engine.prompt_cache import common_prefix
from app.engine.session import Session
from app.engine.width import FixedWidth
from tests import builders_dflash as bd
from tests.builders_mtp import make_qwen3_5_checkpoint

TURNS = ["Hello! How can you help?", "The cat sat on the mat. The dog sat on the log.",
         "Numbers: 0 1 2 3 4 5", "def add(a, b):\n    return a + b\n"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kept-state")
    target, drafter = bd.make_pair(root / "dflash", "2026")
    return {"mtp-target": make_qwen3_5_checkpoint(root / "q35-mtp"),
            "dflash-target": target, "dflash": drafter}


@pytest.fixture
def proposals(monkeypatch) -> list[tuple[str, int, list[int]]]:
    """Every proposal a hidden-state drafter makes: (kind, position, tokens)."""
    seen: list[tuple[str, int, list[int]]] = []
    for cls in (MTPDrafter, DFlashDrafter):
        inner = cls.propose

        def propose(self, committed, k, inner=inner):
            p = inner(self, committed, k)
            if p is not None:
                seen.append((self.kind, len(committed), [int(t) for t in p.tokens.tolist()]))
            return p

        monkeypatch.setattr(cls, "propose", propose)
    return seen


def _session(folders: dict[str, Path], target: str) -> Session:
    s = Session(width_policy=FixedWidth)  # every step drafts: the drafter's state shows
    s.load_target(folders[target])
    if target == "dflash-target":
        s.load_draft(folders["dflash"])
    return s


def _chat(session: Session, kinds: list[str], proposals: list, *, reuse: bool
          ) -> list[tuple[DoneEvent, list, list[int]]]:
    """One conversation, turn ``i`` drafted by ``kinds[i]``: each turn's result, the
    drafter's proposals during it and the turn's prompt tokens."""
    messages: list[dict[str, str]] = []
    out = []
    for text, kind in zip(TURNS, kinds, strict=False):
        messages.append({"role": "user", "content": text})
        start = len(proposals)
        req = GenerationRequest(messages=tuple(messages), max_tokens=20, draft_kind=kind,
                                allow_fallback=False, adaptive=False, lookup_assist=False,
                                reuse_cache=reuse, conversation="chat" if reuse else None)
        done = list(session.generate(req))[-1]
        assert isinstance(done, DoneEvent) and done.finish_reason != "error", done.error
        out.append((done, list(proposals[start:]), session.encode(req)))
        messages.append({"role": "assistant", "content": done.text})
    return out


@pytest.mark.parametrize("target, kinds", [
    ("mtp-target", ["none", "mtp", "mtp"]),  # a switch to MTP, then two MTP turns in a row
    ("dflash-target", ["prompt-lookup", "dflash", "dflash", "none"]),  # and with DFlash
])
def test_kept_state_follows_the_chat_whatever_the_kind(folders, proposals, target, kinds):
    fresh = _chat(_session(folders, target), kinds, proposals, reuse=False)
    kept = _chat(_session(folders, target), kinds, proposals, reuse=True)
    drafted = 0
    for i, ((a, drafts_a, _), (b, drafts_b, prompt)) in enumerate(zip(fresh, kept, strict=True)):
        assert b.token_ids == a.token_ids, (i, kinds[i])
        assert b.timings.fallback is None and b.timings.draft_kind == kinds[i]
        # the rebuilt drafter proposes exactly what the drafter that read everything proposes
        assert drafts_b == drafts_a, (i, kinds[i])
        drafted += len(drafts_b)
        assert a.timings.cache_n == 0
        assert b.timings.prompt_n + b.timings.cache_n == a.timings.prompt_n == len(prompt)
        if not i:
            continue
        # only the new turn's tokens are read: all the previous turn kept that this prompt
        # repeats (a tiny random model's reply does not survive the round trip through text
        # whole; a recurrent target goes back to its last turn boundary within that)
        prev, _, prev_prompt = kept[i - 1]
        common = min(common_prefix(prompt, prev_prompt + list(prev.token_ids)), len(prompt) - 1)
        assert b.timings.cache_n >= len(prev_prompt) - 1, (i, kinds[i])
        if target == "dflash-target":  # a KV cache goes back to any length
            assert b.timings.cache_n == common, (i, kinds[i])
        else:
            assert b.timings.cache_n <= common
    assert drafted > 10  # the drafters really ran, on every drafting turn
    assert all(kept[i][1] for i, k in enumerate(kinds) if k in ("mtp", "dflash"))


def test_rows_are_kept_only_where_a_hidden_state_drafter_can_run(folders):
    """A target no hidden-state drafter can read keeps no rows with its conversations."""
    s = Session()
    s.load_target(folders["dflash-target"])  # no DFlash drafter loaded, no MTP head
    req = GenerationRequest(prompt="Hi", max_tokens=4, reuse_cache=True, conversation="c")
    list(s.generate(req))
    (entry,) = s.prompt_cache._entries.values()
    assert entry.rows is None
    s.load_draft(folders["dflash"])
    s.prompt_cache.clear()
    list(s.generate(req))
    (entry,) = s.prompt_cache._entries.values()
    assert entry.rows is not None and entry.rows.n == entry.target.n > 0
