"""DFlash block drafter: ``block_size - 1`` proposals from one non-causal drafter pass.

Each round the block is ``[last committed token, MASK x (B-1)]`` at positions
``len(committed) - 1 ..``; it sees the drafter's cached context (K/V made from the target's
layer outputs at ``target_layer_ids`` for every committed position before the block) and
itself. Its outputs at the masked positions, through the target's LM head, are the proposals.

Context bookkeeping (the hidden-row invariant of ``base.py``): the drafter gets one row per
position the target has fed, in order. Rows up to position ``len(committed) - 2`` go into its
cache at the next proposal (in the same pass as the block); a newer row (after a plain step
the target has already fed the last committed token) waits. The cache therefore only ever
holds committed context; the block's own K/V are never kept, and each round rewinds the cache
to the committed context length all the same.

A drafter folder may carry ``draft_head.json`` (``{"format": 1, "token_ids": [...]}``): the
target's head is then read only at those ids (the shipped demo drafter does this); z-lab
checkpoints use the target's full head.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlx.core as mx

from app.engine import sampling as sm
from app.engine.drafters.base import Drafter, Proposal
from app.engine.drafters.dflash_model import DFlashConfig, DFlashModel, load_model
from app.engine.events import SamplingParams
from app.engine.mlx_types import float_list
from app.errors import DraftPairError

if TYPE_CHECKING:
    from app.engine.drafter_context import DrafterContext
    from app.engine.models import LoadedModel
    from app.engine.taps import Hidden

DEMO_FOLDER = "demo-dflash"
# verify cost per extra token until measured (CPU figures: 4-5 tokens ~1.05 steps, 8 ~1.4)
VERIFY_SLOPE = 0.06
MIN_VERIFY_SLOPE = 0.02  # every verified token costs at least this much


@dataclass
class DFlashAssets:
    """What ``load`` returns (kept by the session for its target)."""

    path: Path
    model: DFlashModel
    head_ids: mx.array | None  # reduced head: target ids of the rows used
    head_w: mx.array | None
    calibration: tuple[float, ...] = ()

    @property
    def config(self) -> DFlashConfig:
        return self.model.config


def target_problem(config: DFlashConfig, target: LoadedModel) -> str | None:
    """Why this drafter cannot read this target (None if it can)."""
    from app.engine.taps import stack

    tcfg = target.config
    inner = tcfg.get("text_config")
    text: dict[str, Any] = inner if isinstance(inner, dict) else tcfg
    hidden = int(text.get("hidden_size") or tcfg.get("hidden_size") or 0)
    try:
        n_layers = len(stack(target.model)[1])
    except DraftPairError as exc:
        return str(exc).rstrip(".")
    vocab = target.vocab_size
    if hidden and hidden != config.hidden_size:
        return (f"the DFlash drafter was made for a target with hidden size "
                f"{config.hidden_size}, this target has {hidden}")
    if config.num_target_layers != n_layers:
        return (f"the DFlash drafter was made for a {config.num_target_layers}-layer target, "
                f"this target has {n_layers} layers")
    bad = [i for i in config.target_layer_ids if not 0 <= i < n_layers]
    if bad:
        return f"the DFlash drafter reads layer {bad[0]}, which this target does not have"
    if not 0 <= config.mask_token_id < vocab:
        return (f"the DFlash drafter's mask token {config.mask_token_id} is outside this "
                f"target's vocabulary of {vocab}")
    if config.vocab_size != vocab:
        return (f"the DFlash drafter was made for a vocabulary of {config.vocab_size} tokens, "
                f"this target has {vocab}")
    return None


def _reduced_head(folder: Path, target: LoadedModel, vocab: int
                  ) -> tuple[mx.array | None, mx.array | None]:
    f = folder / "draft_head.json"
    if not f.exists():
        return None, None
    from app.engine.models import dequantized_weight
    from app.engine.taps import stack

    try:
        ids = sorted({int(i) for i in json.loads(f.read_text())["token_ids"] if 0 <= int(i) < vocab})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DraftPairError(f"Cannot read the DFlash drafter's draft_head.json in {folder}.") from exc
    if not ids:
        return None, None
    inner, _, norm_attr = stack(target.model)
    lm_head = getattr(target.model, "lm_head", None)
    tied = bool(target.config.get("tie_word_embeddings", lm_head is None))
    layer = inner.embed_tokens if (tied or lm_head is None) else lm_head
    arr = mx.array(ids, dtype=mx.uint32)
    w = dequantized_weight(layer, arr)
    norm = getattr(getattr(inner, norm_attr, None), "weight", None)
    w = w.astype(norm.dtype) if norm is not None else w
    mx.eval(w)
    return arr, w


def load(path: Path, target: LoadedModel) -> DFlashAssets:
    """Load a DFlash drafter folder for ``target``; a plain DraftPairError if they do not fit."""
    from app.engine.taps import norm_dtype

    path = Path(path)
    model = load_model(path, dtype=norm_dtype(target.model))
    check_fits(model.config, target)
    ids, w = _reduced_head(path, target, target.vocab_size)
    return DFlashAssets(path=path, model=model, head_ids=ids, head_w=w,
                        calibration=_calibration(path))


def check_fits(config: DFlashConfig, target: LoadedModel, name: str = "DFlash drafter") -> None:
    """A plain DraftPairError, naming the drafter ``name``, when ``config`` does not fit."""
    problem = target_problem(config, target)
    if problem:
        problem = problem.replace("DFlash drafter", name)
        raise DraftPairError(problem[0].upper() + problem[1:] + ".")


def _calibration(folder: Path) -> tuple[float, ...]:
    """Per block position, how far the drafter's confidence is to be trusted (DraftPair's own
    demo drafter measures it on held-out replies; other drafters: 1)."""
    try:
        raw = json.loads((folder / "config.json").read_text()).get("draftpair_calibration")
        return tuple(min(1.0, max(0.0, float(x))) for x in raw or ())
    except (OSError, ValueError, TypeError):
        return ()


def demo_folder(target: LoadedModel) -> Path | None:
    """The shipped demo drafter's folder when ``target`` is the demo target (reads nothing)."""
    from app.engine.drafters.demo_folders import shipped_for_demo

    return shipped_for_demo(target, DEMO_FOLDER)


def unavailable(ctx: DrafterContext) -> str | None:
    """A pure query: the loaded drafter's fit to the target, or whether one could be loaded."""
    a = ctx.asset
    if a is None:
        if demo_folder(ctx.target) is not None:
            return None
        return "no DFlash drafter is loaded (choose a DFlash drafter folder as the draft)"
    return target_problem(a.config, ctx.target)


def load_default(ctx: DrafterContext) -> DFlashAssets | None:
    """The drafter a target gets with no folder chosen: the demo's own, for the demo target."""
    folder = demo_folder(ctx.target)
    return load(folder, ctx.target) if folder is not None else None


def make(ctx: DrafterContext) -> DFlashDrafter:
    a = ctx.asset
    if a is None:
        raise DraftPairError("No DFlash drafter is loaded.")
    return DFlashDrafter(ctx.target, a, adaptive=bool(getattr(ctx.request, "adaptive", True)))


class DFlashDrafter(Drafter):
    catches_up = True  # the tokens it sat out are fed at its next proposal
    block = True
    marginals = True  # one block pass: per-position distributions (DDTree's trees)
    step_cost = 0.15  # until the session measures it at warm-up

    def __init__(self, target: LoadedModel, assets: DFlashAssets, *, adaptive: bool = True,
                 calibration: float = 1.0):
        from app.engine.taps import TapRequest, stack

        self.target = target
        self.assets = assets
        self.net = assets.model
        self.cfg = assets.config
        self.taps = TapRequest(layers=tuple(self.cfg.target_layer_ids))
        self.inner = stack(target.model)[0]
        self.sampling = SamplingParams()
        self.stochastic = False
        self.cache: list[Any] = []
        self.rows: list[mx.array] = []  # rows received but not yet in the cache
        self.n_rows = 0  # rows received in this request (= positions the target fed)
        self.n_cached = 0
        self.lost = False
        self.rounds = self.proposed = self.accepted = 0
        # adaptive: each round proposes only as many of the block's tokens as pay, judged by
        # the drafter's own confidence (exactness does not depend on it)
        self.adaptive = adaptive
        # the loop's width policy decides whether a round drafts at all; once it does, the
        # drafter is asked for its whole block and stops where its confidence says
        self.adaptive_width = adaptive
        self.stops_early = adaptive
        self.calibration = calibration
        self._verify: dict[int, float] = {}
        self._kept_rows: Hidden | None = None

    @property
    def block_size(self) -> int:
        return self.cfg.block_size

    # -- per request --------------------------------------------------------------------
    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        self.sampling = sampling
        self.stochastic = not sampling.greedy and not sm.shares_draws(sampling)
        self.cache = self.net.make_cache()
        self.rows, self.n_rows, self.n_cached, self.lost = [], 0, 0, False
        self.rounds = self.proposed = self.accepted = 0
        kept, self._kept_rows = self._kept_rows, None
        if kept is not None:  # a kept conversation: its rows enter the cache at the first round
            self._take(kept)
        return []

    def resume_rows(self, rows: Hidden) -> None:
        """The drafter's context is rebuilt from the target's rows of the reused prefix: like
        any rows not yet cached, they enter its cache in the next round's pass."""
        self._kept_rows = rows

    def _take(self, hidden: Hidden | None) -> None:
        if hidden is None:
            self.lost = True  # rows missing: positions would no longer line up
            return
        if hidden.n == 0:  # the step fed nothing (its token waits to be fed with a round)
            return
        feats = mx.concatenate([hidden.layers[i] for i in self.cfg.target_layer_ids], axis=-1)
        self.rows.append(feats)
        self.n_rows += int(feats.shape[0])

    def prefill(self, tokens: list[int], hidden: Hidden | None) -> None:
        self._take(hidden)

    def _context(self, upto: int) -> mx.array | None:
        """Rows for positions ``n_cached .. upto-1`` (leaving newer ones waiting)."""
        n = upto - self.n_cached
        if n <= 0 or not self.rows:
            return None
        allrows = mx.concatenate(self.rows, axis=0) if len(self.rows) > 1 else self.rows[0]
        take, rest = allrows[:n], allrows[n:]
        self.rows = [rest] if rest.shape[0] else []
        self.n_cached += int(take.shape[0])
        return take[None]

    def logits(self, states: mx.array) -> mx.array:
        """Raw logits over the head (reduced: its own row order) for states (n, H)."""
        if self.assets.head_w is not None:
            return states @ self.assets.head_w.T
        from app.engine.taps import head

        return head(self.target.model, states)

    def propose(self, committed: list[int], k: int) -> Proposal | None:
        k = min(k, self.cfg.block_size - 1)
        L = len(committed)
        if k <= 0 or self.lost or L < 1 or self.n_rows < L - 1:
            return None
        started = time.perf_counter()
        pending = self.n_rows == L - 1  # the last committed token is not fed yet
        ctx = self._context(L - 1)
        block = mx.array([committed[-1]] + [self.cfg.mask_token_id] * (self.cfg.block_size - 1),
                         dtype=mx.uint32)
        emb = self.inner.embed_tokens(block[None])
        states = self.net(emb.astype(self._dtype()), ctx, self.cache)[0, 1: 1 + k]
        logits = self.logits(states).astype(mx.float32)
        q = None
        if not self.sampling.greedy:  # a draw: independent (rejection) or shared
            scaled = sm.scaled_logits(logits, self.sampling)
            probs = mx.softmax(scaled, axis=-1)
            picks = (mx.random.categorical(scaled) if self.stochastic else
                     sm.draw(scaled, self.sampling, sm.positions_from(L, k),
                             self.assets.head_ids, self.target.vocab_size))
            conf = mx.take_along_axis(probs, picks[:, None], axis=-1)[:, 0]
        else:
            picks = mx.argmax(logits, axis=-1)
            probs = mx.softmax(logits, axis=-1)
            conf = mx.max(probs, axis=-1)
        tokens = self._to_target_ids(picks).astype(mx.uint32)
        if self.adaptive:
            mx.eval(tokens, conf)
            k = self.choose_width(float_list(conf), pending)
            tokens = tokens[:k]
            probs = probs[:k]
        dist = None
        if self.stochastic or self.keep_dist:
            dist = self._to_target_probs(probs[:k])
            q = dist if self.stochastic else None
        mx.async_eval(tokens, *([q] if q is not None else []))
        self.rounds += 1
        self.proposed += k
        return Proposal(tokens=tokens, q=q, dist=dist,
                        draft_ms=(time.perf_counter() - started) * 1e3)

    def verify_cost(self, n: int) -> float:
        """A target pass over ``n`` tokens, in plain steps (measured at warm-up)."""
        if n <= 1:
            return 1.0
        floor = 1.0 + MIN_VERIFY_SLOPE * (n - 1)  # timings on a busy machine can be flat
        if n in self._verify:
            return max(self._verify[n], floor)
        return 1.0 + VERIFY_SLOPE * (n - 1)

    def choose_width(self, conf: list[float], pending: bool) -> int:
        """How many of the block's proposals to send: the first always (whether a round
        drafts at all is the loop's width policy's call, from observed acceptance), then as
        many as raise the expected tokens per unit of verify cost, taking the drafter's own
        probabilities as acceptance chances (the drafting pass is already paid)."""
        base = 1 if pending else 0  # the pending token is fed with the proposals
        best_k, best = 0, 0.0
        run = expect = 1.0
        scale = self.assets.calibration if getattr(self, "assets", None) else ()
        for j, c in enumerate(conf):
            f = scale[j] if j < len(scale) else 1.0
            run *= max(0.0, min(1.0, c * f * self.calibration))
            expect += run
            ratio = expect / self.verify_cost(base + j + 1)
            if j == 0 or ratio > best:
                best_k, best = j + 1, ratio
        return best_k

    def _dtype(self) -> mx.Dtype:
        return self.net.norm.weight.dtype

    def _to_target_ids(self, picks: mx.array) -> mx.array:
        return self.assets.head_ids[picks] if self.assets.head_ids is not None else picks

    def _to_target_probs(self, q: mx.array) -> mx.array:
        v = self.target.vocab_size
        if self.assets.head_ids is not None:
            return mx.zeros((q.shape[0], v), q.dtype).at[:, self.assets.head_ids].add(q)
        if q.shape[-1] < v:
            return mx.concatenate([q, mx.zeros((q.shape[0], v - q.shape[-1]), q.dtype)], -1)
        return q[:, :v]

    def observe(self, committed: list[int], proposal: Proposal | None, accepted: int,
                new_tokens: list[int], hidden: Hidden | None = None) -> None:
        self._take(hidden)
        if proposal is not None:
            self.accepted += accepted
        # only committed context is cached; rewind to it all the same (a no-op normally)
        keep = min(self.n_cached, len(committed))
        if self.cache and self.cache[0].offset > keep:
            from app.engine.rollback import rewind_cache

            rewind_cache(self.cache, keep)
            self.n_cached = keep

    # -- costs --------------------------------------------------------------------------
    def warmup(self, widths: list[int]) -> None:
        """One full block pass on a scratch cache (with a few context rows); its time is
        the drafting cost of a round."""
        n_in = len(self.cfg.target_layer_ids) * self.cfg.hidden_size
        feats = mx.zeros((1, 4, n_in), self._dtype())
        block = mx.zeros((1, self.cfg.block_size), mx.uint32)
        best = None
        for _ in range(3):
            cache = self.net.make_cache()
            mx.eval(self.net(self.inner.embed_tokens(block).astype(self._dtype()), feats, cache))
            t0 = time.perf_counter()
            out = self.net(self.inner.embed_tokens(block).astype(self._dtype()), feats[:, :1],
                           cache)
            mx.eval(self.logits(out[0, 1:]))
            ms = (time.perf_counter() - t0) * 1e3
            best = ms if best is None else min(best, ms)
        self.draft_step_ms = best

    def set_verify_costs(self, costs: dict[int, float]) -> None:
        self._verify = dict(costs)

    def close(self) -> None:
        self.cache, self.rows = [], []

    def stats(self) -> dict[str, Any]:
        return {"block_size": self.cfg.block_size, "rounds": self.rounds,
                "proposed": self.proposed, "accepted": self.accepted,
                "head": "reduced" if self.assets.head_ids is not None else "target"}
