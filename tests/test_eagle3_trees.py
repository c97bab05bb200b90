"""Trees grown from EAGLE-3 chains: the drafter's runner-up tokens become extra leaves beside
its chain. Greedy replies stay identical to plain decoding with tree rounds taken (trees on
under a GPU-like speed table, and the flat table), the drafter's state follows whatever path
the target accepted (a leaf off the chain included), and sampled replies keep the target's
distribution (chi-square against enumeration; a wrong walk fails the same test)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import mlx.core as mx
import pytest

from app.engine import tree_verify
from app.engine.calibration import CalibrationStore, new_table
from app.engine.events import DoneEvent, GenerationRequest, SamplingParams
from app.engine.session import Session
from tests import eagle3_scenario as sc
from tests.test_eagle3 import pairs, root, trained  # noqa: F401 - the fixtures
from tests.test_engine import _chi2, _chi2_sf, _exact_sequence_probs


def _session(target: Path, drafter: Path) -> Session:
    """The pair with a GPU-like speed table (a pass over up to 17 tokens costs one step, a
    drafter step a twentieth of one), so trees "on" grow the leaves that pay whatever this
    machine's speed."""
    from app.engine.session_warmup import loaded_drafter_key

    s = Session(calibrations=CalibrationStore(None))
    s.load_target(target)
    s.load_draft(drafter)
    assert s.target is not None and s.draft_kind is not None
    table = new_table(s.target.path, {}, [0], [[1, 17]], [[10.0, 10.0]], 0.0)
    s.calibration = table.with_drafter(loaded_drafter_key(s, s.draft_kind), 0.5)
    return s


def _run(s: Session, kind: str, trees: str, *, prompt: tuple[int, ...] = sc.PROMPT,
         max_tokens: int = 40, sampling: SamplingParams | None = None) -> DoneEvent:
    done = list(s.generate(GenerationRequest(
        prompt_tokens=prompt, chat=False, draft_kind=kind, draft_width=4, trees=trees,
        max_tokens=max_tokens, allow_fallback=False, lookup_assist=False, adaptive=False,
        memory_interval_s=1e9, sampling=sampling or SamplingParams())))[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done.error
    return done


@pytest.mark.parametrize("key", ["trained", "speculators"])
def test_greedy_trees_identical_to_plain(pairs, trained, key, monkeypatch):  # noqa: F811
    """The trained drafter (its full vocabulary) and an untrained one with its own reduced
    vocabulary (leaves mapped to the target's ids through ``d2t``)."""
    from app import kinds
    from app.engine import verify_step

    off_chain: list[tuple[int, ...]] = []  # accepted paths that ended on a leaf
    real_verify = verify_step.verify_tree

    def verify(rows, proposal, **kw):
        verdict = real_verify(rows, proposal, **kw)
        if verdict.path and verdict.path[-1] >= (proposal.spine or proposal.k):
            off_chain.append(verdict.path)
        return verdict

    monkeypatch.setattr(verify_step, "verify_tree", verify)
    s = _session(pairs["target"], trained if key == "trained" else pairs[key])
    kind = s.draft_kind
    assert kind is not None and kinds.get(kind).grows_trees
    plain = _run(s, kinds.OFF, "off")
    chain = _run(s, kind, "off")
    assert chain.token_ids == plain.token_ids and chain.timings.tree_rounds == 0
    for trees in ("on", "flat"):
        spec = _run(s, kind, trees)
        assert spec.token_ids == plain.token_ids, trees
        t = spec.timings
        assert t.fallback is None
        # "on" pays a tree's overhead: only the untrained drafter doubts enough for leaves
        assert t.tree_rounds > 0 or (trees, key) == ("on", "trained"), (trees, t.tree_rounds)
        tree_rounds = [r for r in spec.rounds if r.tree_nodes]
        assert all(r.tree_nodes > r.proposed for r in tree_rounds)
    if key == "trained":  # the drafter then pairs the kept rows of a path off its chain
        assert off_chain, "some round accepted a runner-up leaf"


def test_the_drafter_follows_the_accepted_path(pairs, trained):  # noqa: F811
    """After a round whose accepted path left the chain, the drafter's next proposal equals a
    fresh drafter's that read the same committed text from scratch."""
    from app.engine.drafters.eagle3 import Eagle3Drafter, load
    from app.engine.models import load_model
    from app.engine.taps import Hidden

    t = load_model(pairs["target"])
    assets = load(trained, t)
    cap = assets.capture
    h = t.model.model.embed_tokens.weight.shape[1]

    def hidden(tokens: list[int], lo: int, hi: int) -> Hidden:
        a = mx.array(sc.rows_for(t.model, tokens, cap))[lo:hi]
        return Hidden(layers={c: a[:, j * h:(j + 1) * h] for j, c in enumerate(cap)})

    committed = list(sc.PROMPT)
    d = Eagle3Drafter(assets, target_vocab=t.vocab_size)
    d.keep_dist = True
    d.begin(list(committed), SamplingParams())
    d.prefill(committed, hidden(committed, 0, len(committed)))
    committed.append(sc.BONUS)
    p = d.propose(committed, 4)
    assert p is not None and p.dist is not None and p.dist.shape == (4, t.vocab_size)
    chain = [int(x) for x in p.tokens.tolist()]
    # the target took the chain's first token, then a runner-up beside its second, then its own
    runner = int(mx.argsort(-p.dist[1])[1].item())
    assert runner != chain[1]
    kept = [chain[0], runner]
    new = 7
    rows = hidden(committed + kept, len(committed) - 1, len(committed) + len(kept))
    committed = committed + kept + [new]
    d.observe(committed, p, 1, kept + [new], rows)  # the drafter's own chain: 1 accepted
    nxt = d.propose(committed, 4)

    fresh = Eagle3Drafter(assets, target_vocab=t.vocab_size)
    fresh.begin(committed[:-1], SamplingParams())
    fresh.prefill(committed[:-1], hidden(committed[:-1], 0, len(committed) - 1))
    want = fresh.propose(committed, 4)
    assert nxt is not None and want is not None
    assert nxt.tokens.tolist() == want.tokens.tolist()


def test_sampled_trees_keep_the_distribution(pairs, trained, monkeypatch):  # noqa: F811
    s = _session(pairs["target"], trained)
    kind = s.draft_kind
    assert kind is not None and s.target is not None
    prompt = sc.PROMPT[:8]
    sampling = SamplingParams(temperature=1.0, top_k=3)
    length, n = 3, 600
    exact = _exact_sequence_probs(s.target, list(prompt), sampling, length)

    def sample(n: int) -> tuple[Counter, int]:
        counts: Counter = Counter()
        tree_rounds = 0
        for seed in range(n):
            done = _run(s, kind, "flat", prompt=prompt, max_tokens=length,
                        sampling=SamplingParams(temperature=1.0, top_k=3, seed=seed))
            counts[tuple(done.token_ids)] += 1
            tree_rounds += done.timings.tree_rounds
        return counts, tree_rounds

    counts, tree_rounds = sample(n)
    assert tree_rounds >= n // 2
    stat, df = _chi2(counts, exact, n)
    assert _chi2_sf(stat, df) > 1e-3, (stat, df)

    # the same test catches a wrong walk: following the child with the target's top token
    real = tree_verify.sm.sample

    def argmax_rows(rows, sampling, positions=None):
        return real(rows, SamplingParams(temperature=0.0)) if rows.shape[0] > 1 else \
            real(rows, sampling, positions)

    monkeypatch.setattr(tree_verify.sm, "sample", argmax_rows)
    wrong, _ = sample(n // 2)
    stat_w, df_w = _chi2(wrong, exact, n // 2)
    assert _chi2_sf(stat_w, df_w) < 1e-6, (stat_w, df_w)
