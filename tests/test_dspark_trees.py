"""Trees grown from DSpark chains: each position's distribution is corrected for the chain's
token before it, so the runner-ups become leaves beside the chain (never nodes under a
runner-up, as DFlash's independent positions allow). Greedy replies stay identical to plain
decoding with tree rounds taken; sampled replies keep the target's distribution (chi-square
against enumeration; a wrong walk fails the same test)."""

from __future__ import annotations

from collections import Counter

import pytest

from app.engine import proposals, tree_verify
from app.engine.events import DoneEvent, GenerationRequest, SamplingParams
from app.engine.proposal import Proposal
from app.engine.session import Session
from tests import dflash2_scenario as sc
from tests.test_dspark import pair, root  # noqa: F401 - the fixtures
from tests.test_engine import _chi2, _chi2_sf, _exact_sequence_probs


def _run(s: Session, kind: str, trees: str, *, prompt: tuple[int, ...] = sc.PROMPT,
         max_tokens: int = 40, sampling: SamplingParams | None = None) -> DoneEvent:
    done = list(s.generate(GenerationRequest(
        prompt_tokens=prompt, chat=False, draft_kind=kind, draft_width=4, trees=trees,
        max_tokens=max_tokens, allow_fallback=False, lookup_assist=False, adaptive=False,
        memory_interval_s=1e9, sampling=sampling or SamplingParams())))[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done.error
    return done


@pytest.fixture(scope="module")
def session(pair) -> Session:  # noqa: F811
    s = Session()
    s.load_target(pair[0])
    s.load_draft(pair[1])
    return s


def test_greedy_trees_identical_to_plain_with_leaves_beside_the_chain(session, monkeypatch):
    from app import kinds

    kind = session.draft_kind
    assert kind is not None and kinds.get(kind).grows_trees
    seen: list[Proposal] = []
    real = proposals.NodeBudget.grow

    def grow(self, proposal, *a, **kw):
        out = real(self, proposal, *a, **kw)
        seen.append(out)
        return out

    monkeypatch.setattr(proposals.NodeBudget, "grow", grow)
    plain = _run(session, kinds.OFF, "off")
    spec = _run(session, kind, "flat")
    assert spec.token_ids == plain.token_ids
    assert spec.timings.fallback is None and spec.timings.tree_rounds > 0
    trees = [p for p in seen if p.parents is not None]
    assert trees
    for p in trees:
        assert p.parents is not None and p.spine is not None
        # every node off the chain hangs under a chain node (or the committed text)
        assert all(par < p.spine - 1 for par in p.parents[p.spine:]), p.parents


def test_sampled_trees_keep_the_distribution(session, monkeypatch):
    kind = session.draft_kind
    assert kind is not None and session.target is not None
    prompt = sc.PROMPT[:8]
    sampling = SamplingParams(temperature=1.0, top_k=3)
    length, n = 3, 600
    exact = _exact_sequence_probs(session.target, list(prompt), sampling, length)

    def sample(n: int) -> tuple[Counter, int]:
        counts: Counter = Counter()
        tree_rounds = 0
        for seed in range(n):
            done = _run(session, kind, "flat", prompt=prompt, max_tokens=length,
                        sampling=SamplingParams(temperature=1.0, top_k=3, seed=seed))
            counts[tuple(done.token_ids)] += 1
            tree_rounds += done.timings.tree_rounds
        return counts, tree_rounds

    counts, tree_rounds = sample(n)
    assert tree_rounds >= n // 2
    stat, df = _chi2(counts, exact, n)
    assert _chi2_sf(stat, df) > 1e-3, (stat, df)

    real = tree_verify.sm.sample  # a wrong walk: the child with the target's top token

    def argmax_rows(rows, sampling, positions=None):
        return real(rows, SamplingParams(temperature=0.0)) if rows.shape[0] > 1 else \
            real(rows, sampling, positions)

    monkeypatch.setattr(tree_verify.sm, "sample", argmax_rows)
    wrong, _ = sample(n // 3)
    stat_w, df_w = _chi2(wrong, exact, n // 3)
    assert _chi2_sf(stat_w, df_w) < 1e-6, (stat_w, df_w)
