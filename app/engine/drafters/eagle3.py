"""EAGLE-3 drafters as a draft kind: one small layer reads three of the target's layers.

Like the MTP head, the drafter keeps one cache entry per *pair* (the target's rows of position
``p``, token ``p + 1``), i.e. per position whose next token is known: rows are the outputs of
the three target layers the drafter reads (the taps), concatenated and projected by ``fc``.
The output of the newest pair predicts the token after the newest committed one (the first
proposal); further proposals chain on the drafter's own output and token and are dropped
before the next pairing, so every kept entry reads the target's real state (as the EAGLE-3
paper and mlx-vlm's ``Eagle3DraftModel`` do). The drafter speaks its own reduced vocabulary;
``d2t`` maps its ids to the target's.

Greedy requests take the argmax (identical to the target by the verify step). Sampling
requests sample from the drafter's distribution at the request's temperature / top-p, spread
over the *target* vocabulary through ``d2t``, and hand it as ``q`` to rejection sampling.
Where trees grow from its chains (``keep_dist``) every proposal also carries that
distribution (greedy: the plain softmax): the round's budget adds the runner-up tokens as
extra leaves beside the chain (EAGLE-2's confidence-ordered expansion, ``tree_build``). The
drafter's own state stays the chain: whatever path the target accepts, the chained entries are
dropped and the kept rows of that path are paired at the next proposal.

Module entry points: ``make(ctx)``, ``unavailable(ctx)``, ``load(path, target)``,
``target_problem(config, target)``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from app.checkpoints.eagle3_config import reads_layers
from app.engine import sampling as sm
from app.engine.drafters.base import Drafter
from app.engine.drafters.eagle3_model import Eagle3Config, Eagle3Weights, load_model
from app.engine.events import SamplingParams
from app.engine.mlx_types import item_int
from app.engine.proposal import Proposal
from app.engine.rollback import rewind_cache
from app.engine.taps import Hidden, TapRequest, norm_dtype, num_layers, stack
from app.errors import DraftPairError

if TYPE_CHECKING:
    from app.engine.drafter_context import DrafterContext
    from app.engine.models import LoadedModel

DEMO_FOLDER = "demo-eagle3"  # the drafter trained for the demo target, in the resources

@dataclass
class Eagle3Assets:
    path: Path
    weights: Eagle3Weights
    capture: tuple[int, ...]  # 0-based target decoder layers whose outputs it reads
    embed: Any  # the embedding module or array the drafter embeds tokens with

    @property
    def config(self) -> Eagle3Config:
        return self.weights.model.config


def _text_config(target: LoadedModel) -> dict[str, Any]:
    tcfg = target.config
    text = tcfg.get("text_config")
    return text if isinstance(text, dict) else tcfg


def target_problem(config: Eagle3Config, target: LoadedModel, *, has_d2t: bool = True,
                   embed_ok: bool = True) -> str | None:
    """Why this drafter cannot draft for this target (None if it can), one plain clause."""
    text = _text_config(target)
    hidden = int(text.get("hidden_size") or 0)
    try:
        n_layers = num_layers(target.model)
    except DraftPairError as exc:
        return str(exc).rstrip(".")
    if hidden and hidden != config.target_hidden_size:
        return (f"the EAGLE-3 drafter was made for a target with hidden size "
                f"{config.target_hidden_size}, this target has {hidden}")
    ids = list(config.layer_ids) if config.layer_ids else reads_layers({}, n_layers)
    bad = [i for i in ids if not 1 <= i <= n_layers]
    if bad:
        return (f"the EAGLE-3 drafter reads layer {bad[0]}, which this {n_layers}-layer target "
                f"does not have")
    if config.vocab_size != target.vocab_size:
        return (f"the EAGLE-3 drafter was made for a vocabulary of {config.vocab_size} tokens, "
                f"this target has {target.vocab_size}")
    if config.reduced and not has_d2t:
        return ("the EAGLE-3 drafter has its own smaller vocabulary but no d2t table "
                "mapping it to the target's")
    archs = [str(a) for a in target.config.get("architectures") or []]
    if config.verifier_archs and archs and not set(config.verifier_archs) & set(archs):
        return (f"the EAGLE-3 drafter was made for a {config.verifier_archs[0]} target, "
                f"this target is a {archs[0]}")
    if not embed_ok:
        return ("the EAGLE-3 drafter needs the target's token embeddings of width "
                f"{config.hidden_size}, which this target does not have")
    return None


def load(path: Path | str, target: LoadedModel) -> Eagle3Assets:
    """Load an EAGLE-3 drafter folder for ``target``; a plain DraftPairError if they do not
    fit."""
    path = Path(path)
    inner = stack(target.model)[0]
    weights = load_model(path, dtype=norm_dtype(target.model))
    cfg = weights.model.config
    embed: Any = getattr(inner, "embed_tokens", None)
    w = getattr(embed, "weight", None)
    target_fits = embed is not None and (w is None or tuple(w.shape[-1:]) == (cfg.hidden_size,)
                                         or hasattr(embed, "scales"))
    if not target_fits:
        embed = weights.embed
    problem = target_problem(cfg, target, has_d2t=weights.d2t is not None,
                             embed_ok=embed is not None)
    if problem:
        raise DraftPairError(problem[0].upper() + problem[1:] + ".")
    if weights.d2t is not None:
        top = mx.arange(cfg.draft_vocab_size) + weights.d2t
        if item_int(mx.max(top)) >= target.vocab_size or item_int(mx.min(top)) < 0:
            raise DraftPairError("The EAGLE-3 drafter's d2t table maps to tokens this target "
                                 "does not have.")
    ids = reads_layers({"layer_ids": list(cfg.layer_ids) if cfg.layer_ids else None},
                       num_layers(target.model))
    return Eagle3Assets(path=path, weights=weights, capture=tuple(i - 1 for i in ids),
                        embed=embed)


def demo_folder(target: LoadedModel) -> Path | None:
    """The shipped demo drafter's folder when ``target`` is the demo target (reads nothing)."""
    from app.engine.drafters.demo_folders import shipped_for_demo

    return shipped_for_demo(target, DEMO_FOLDER)


def load_default(ctx: DrafterContext) -> Eagle3Assets | None:
    """The drafter a target gets with no folder chosen: the demo's own, for the demo target."""
    folder = demo_folder(ctx.target)
    return load(folder, ctx.target) if folder is not None else None


def unavailable(ctx: DrafterContext) -> str | None:
    a = ctx.asset
    if a is None:
        if demo_folder(ctx.target) is not None:
            return None
        return "no EAGLE-3 drafter is loaded (choose an EAGLE-3 drafter folder as the draft)"
    return target_problem(a.config, ctx.target, has_d2t=a.weights.d2t is not None)


def make(ctx: DrafterContext) -> Eagle3Drafter:
    a = ctx.asset
    if a is None:
        raise DraftPairError("No EAGLE-3 drafter is loaded.")
    return Eagle3Drafter(a, target_vocab=ctx.target.vocab_size)


class Eagle3Drafter(Drafter):
    catches_up = True  # the tokens it sat out are fed at its next proposal
    peeks = True  # a one-token proposal adds no entry of its own (``_drop_spec`` has none)

    def __init__(self, assets: Eagle3Assets, *, target_vocab: int):
        self.assets = assets
        self.net = assets.weights.model
        self.cfg = assets.config
        self.d2t = assets.weights.d2t
        # the target id of each of the drafter's own ids (None: they are the target's ids)
        self.target_ids = (None if self.d2t is None
                           else mx.arange(self.d2t.shape[0]) + self.d2t)
        self.target_vocab = target_vocab
        self.taps = TapRequest(layers=assets.capture)
        self.stochastic = False
        self.sampling = SamplingParams()
        self._kept_rows: Hidden | None = None
        self.n_proposed = self.n_accepted = self.n_rounds = 0
        self._reset([])

    # -- state --------------------------------------------------------------------------
    def _reset(self, prompt: list[int]) -> None:
        self.cache: list[KVCache] = self.net.make_cache()
        self.n_pairs = 0  # cache entries that read the target's real rows
        self.n_rows = 0  # target rows received (positions the target cache holds)
        self.rows: mx.array | None = None  # concatenated taps of positions n_pairs..n_rows-1
        self.seed: mx.array | None = None  # the drafter's output at the newest pair
        self.spec = 0  # chained entries on top of the pairs
        self.known = list(prompt)

    def _features(self, hidden: Hidden | None) -> mx.array | None:
        if hidden is None or hidden.n == 0:
            return None
        return mx.concatenate([hidden.layers[i] for i in self.assets.capture], axis=-1)

    def _add_rows(self, rows: mx.array | None) -> None:
        if rows is None or rows.shape[0] == 0:
            return
        self.rows = rows if self.rows is None else mx.concatenate([self.rows, rows], axis=0)
        self.n_rows += int(rows.shape[0])

    def _embed(self, tokens: mx.array) -> mx.array:
        e = self.assets.embed
        out: mx.array = e[tokens] if isinstance(e, mx.array) else e(tokens)
        return out.astype(self.net.norm.weight.dtype)

    def _step(self, tokens: mx.array, hidden: mx.array) -> mx.array:
        """Feed ``tokens`` (n,) with their hidden inputs (n, H) at the next draft positions;
        the outputs (n, H)."""
        position = int(self.cache[0].offset) + 1
        out = self.net(self._embed(tokens)[None], hidden[None], position, self.cache)
        return out[0]

    def _drop_spec(self) -> None:
        if self.spec:
            rewind_cache(self.cache, self.n_pairs)
        self.spec = 0

    def _pair(self, committed: list[int]) -> None:
        """Feed every position whose next token is now known (one drafter pass)."""
        m = min(self.n_rows, len(committed) - 1)
        n = m - self.n_pairs
        if n <= 0 or self.rows is None:
            return
        tokens = mx.array(committed[self.n_pairs + 1: m + 1], dtype=mx.uint32)
        out = self._step(tokens, self.net.project(self.rows[:n]))
        self.seed = out[-1:]
        self.n_pairs = m
        self.rows = self.rows[n:] if self.rows.shape[0] > n else None

    def _pick(self, h: mx.array, qs: list[mx.array], position: int
              ) -> tuple[mx.array, mx.array]:
        """(draft id, target id) of the proposal at sequence ``position`` from the drafter's
        output ``h``."""
        logits = self.net.logits(h).astype(mx.float32)
        if self.sampling.greedy:
            pick = mx.argmax(logits, axis=-1)
            if self.keep_dist:  # trees grow beside the chain from the runner-ups
                qs.append(self._to_target_probs(mx.softmax(logits, axis=-1)))
        else:
            scaled = sm.scaled_logits(logits, self.sampling)
            if self.stochastic or self.keep_dist:
                qs.append(self._to_target_probs(mx.softmax(scaled, axis=-1)))
            if self.stochastic:
                pick = mx.random.categorical(scaled)
            else:  # the shared draw: the token ids of the drafter's short list get its noise
                pick = sm.draw(scaled, self.sampling, [position], self.target_ids,
                               self.target_vocab)
        target = pick + self.d2t[pick] if self.d2t is not None else pick
        return pick, target.astype(mx.uint32)

    def _to_target_probs(self, q: mx.array) -> mx.array:
        v = self.target_vocab
        if self.target_ids is not None:
            return mx.zeros((q.shape[0], v), q.dtype).at[:, self.target_ids].add(q)
        if q.shape[-1] < v:
            return mx.concatenate([q, mx.zeros((q.shape[0], v - q.shape[-1]), q.dtype)], -1)
        return q[:, :v]

    # -- Drafter ------------------------------------------------------------------------
    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        self.sampling = sampling
        self.stochastic = not sampling.greedy and not sm.shares_draws(sampling)
        self._reset(prompt)
        kept, self._kept_rows = self._kept_rows, None
        if kept is not None:
            self._add_rows(self._features(kept))
        return []

    def resume_rows(self, rows: Hidden) -> None:
        """The drafter's cache is rebuilt from the target's rows of the reused prefix; they
        are paired at the first prefill chunk."""
        self._kept_rows = rows

    def prefill(self, tokens: list[int], hidden: Hidden | None) -> None:
        self._add_rows(self._features(hidden))
        self._pair(self.known)
        if self.seed is not None:  # the drafter reads the prompt with the prompt
            mx.eval(self.seed, *[c.state for c in self.cache])

    def propose(self, committed: list[int], k: int) -> Proposal | None:
        if k <= 0:
            return None
        started = time.perf_counter()
        self._drop_spec()
        self._pair(committed)
        if self.seed is None or self.n_pairs != len(committed) - 1:
            return None  # no state for the newest position yet
        qs: list[mx.array] = []
        h = self.seed
        at = len(committed)  # the sequence position of the first proposal
        pick, tok = self._pick(h, qs, at)
        tokens = [tok]
        for j in range(1, k):
            h = self._step(tok, h)
            self.spec += 1
            pick, tok = self._pick(h, qs, at + j)
            tokens.append(tok)
        out = mx.concatenate(tokens)
        mx.async_eval(out)
        dist = mx.concatenate(qs, axis=0) if qs else None
        return Proposal(tokens=out, q=dist if self.stochastic else None, dist=dist,
                        draft_ms=(time.perf_counter() - started) * 1e3)

    def observe(self, committed: list[int], proposal: Proposal | None, accepted: int,
                new_tokens: list[int], hidden: Hidden | None = None) -> None:
        if proposal is not None:
            self.n_rounds += 1
            self.n_proposed += proposal.k
            self.n_accepted += accepted
        self._drop_spec()
        self._add_rows(self._features(hidden))

    def warmup(self, widths: list[int]) -> None:
        """Compile the pairing widths once and time one chained drafter step."""
        h3 = 3 * self.cfg.target_hidden_size
        dtype = self.net.norm.weight.dtype
        cache = self.net.make_cache()
        saved, self.cache = self.cache, cache
        try:
            for n in sorted({1, 2, *[w + 1 for w in widths]}):
                mx.eval(self._step(mx.zeros((n,), mx.uint32),
                                   self.net.project(mx.zeros((n, h3), dtype))))
            times = []
            h = mx.zeros((1, self.cfg.hidden_size), dtype)
            for _ in range(5):
                t0 = time.perf_counter()
                mx.eval(self.net.logits(self._step(mx.zeros((1,), mx.uint32), h)))
                times.append(time.perf_counter() - t0)
            self.draft_step_ms = sorted(times)[2] * 1e3
        finally:
            self.cache = saved

    def close(self) -> None:
        self._reset([])

    def stats(self) -> dict[str, Any]:
        return {
            "layout": self.cfg.layout,
            "reads_layers": list(self.assets.capture),
            "draft_vocab": self.cfg.draft_vocab_size,
            "step_cost": round(self.step_cost, 3),
            "acceptance": round(self.n_accepted / self.n_proposed, 3) if self.n_proposed else 0.0,
        }
