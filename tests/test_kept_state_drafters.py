"""Kept conversations follow the chat with EAGLE-3, DFlash 2 and DSpark drafters and Gemma 4
assistants too: each turn reads only its new tokens, the drafter rebuilds its state from the
target rows kept with the conversation (the assistant reads the kept target cache itself), and
every turn matches the same turn in a session that keeps nothing (same greedy reply, same
proposals)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import kinds
from app.engine.drafters.dflash2 import DFlash2Drafter
from app.engine.drafters.dspark import DSparkDrafter
from app.engine.drafters.eagle3 import Eagle3Drafter
from app.engine.drafters.gemma4_assistant import Gemma4AssistantDrafter
from app.engine.session import Session
from app.engine.width import FixedWidth
from tests import builders_dflash2 as b2
from tests import builders_dspark as bs
from tests import builders_eagle3 as be
from tests import builders_gemma4 as bg
from tests.test_kept_state import _chat


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("kept-families")
    return {"eagle3": be.make_pair(root / "e3", "speculators"),
            "dflash2": b2.make_pair(root / "d2"), "dspark": bs.make_pair(root / "ds"),
            "gemma4-assistant": bg.make_pair(root / "g4")}


@pytest.fixture
def proposals(monkeypatch) -> list[tuple[str, int, list[int]]]:
    seen: list[tuple[str, int, list[int]]] = []
    for cls in (Eagle3Drafter, DFlash2Drafter, DSparkDrafter, Gemma4AssistantDrafter):
        inner = cls.propose

        def propose(self, committed, k, inner=inner):
            p = inner(self, committed, k)
            if p is not None:
                seen.append((self.kind, len(committed), [int(t) for t in p.tokens.tolist()]))
            return p

        monkeypatch.setattr(cls, "propose", propose)
    return seen


def _session(pair: tuple[Path, Path]) -> Session:
    s = Session(width_policy=FixedWidth)
    s.load_target(pair[0])
    s.load_draft(pair[1])
    return s


@pytest.mark.parametrize("family", ["eagle3", "dflash2", "dspark", "gemma4-assistant"])
def test_kept_state_follows_the_chat(folders, proposals, family):
    probe = _session(folders[family])
    name = probe.draft_kind
    assert name is not None
    turns = ["prompt-lookup", name, name, kinds.OFF]
    fresh = _chat(_session(folders[family]), turns, proposals, reuse=False)
    kept = _chat(_session(folders[family]), turns, proposals, reuse=True)
    drafted = 0
    for i, ((a, drafts_a, _), (b, drafts_b, prompt)) in enumerate(zip(fresh, kept, strict=True)):
        assert b.token_ids == a.token_ids, (i, turns[i])
        assert b.timings.fallback is None and b.timings.draft_kind == turns[i]
        assert drafts_b == drafts_a, (i, turns[i])
        drafted += len(drafts_b)
        assert b.timings.prompt_n + b.timings.cache_n == a.timings.prompt_n == len(prompt)
        if i:
            assert b.timings.cache_n > 0, (i, turns[i])
    assert drafted > 5
    assert all(kept[i][1] for i, k in enumerate(turns) if k == name)
