"""Gemma 4's MTP assistant as a draft kind. It reads, through the taps, the target's final
normed state of every position (rows) and, after every target pass, the target's shared K/V
(``TapRequest.shared_kv``). A round after committed ``t_0..t_{L-1}`` uses the row of position
``L - 2`` (the state that predicted ``t_{L-1}``) and the shared K/V of positions ``0..L-2``
(a longer cache's newer entries are cut off), at position ``L - 2``, as mlx-vlm's MTP loop
does; every further proposal chains on the assistant's own projected state at the same
position. The assistant keeps no cache of its own.

Greedy requests take the argmax; sampling requests sample from the assistant's distribution
at the request's temperature / top-p and hand it as ``q`` to rejection sampling (the
assistant's vocabulary is the target's).

Module entry points: ``make(ctx)``, ``unavailable(ctx)``, ``load(path, target)``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlx.core as mx

from app.checkpoints.gemma4_assistant_config import TARGET_TYPES
from app.engine import sampling as sm
from app.engine.drafters.base import Drafter
from app.engine.drafters.gemma4_assistant_model import AssistantModel, load_model, swa_mask
from app.engine.events import SamplingParams
from app.engine.proposal import Proposal
from app.engine.taps import Hidden, SharedKV, TapRequest, norm_dtype, stack
from app.errors import DraftPairError

if TYPE_CHECKING:
    from app.engine.drafter_context import DrafterContext
    from app.engine.models import LoadedModel


def _text(target: LoadedModel) -> dict[str, Any]:
    t = target.config.get("text_config")
    return t if isinstance(t, dict) else target.config


def target_problem(model: AssistantModel, target: LoadedModel) -> str | None:
    """Why this assistant cannot draft for this target (None if it can), one clause."""
    c = model.config
    mt = str(target.config.get("model_type") or "")
    if mt not in TARGET_TYPES:
        return f"the Gemma 4 assistant drafts for Gemma 4 models, this target is a {mt or 'model of another family'}"
    hidden = int(_text(target).get("hidden_size") or 0)
    if hidden and hidden != c.backbone_hidden_size:
        return (f"the Gemma 4 assistant was made for a target with hidden size "
                f"{c.backbone_hidden_size}, this target has {hidden}")
    if c.vocab_size != target.vocab_size:
        return (f"the Gemma 4 assistant was made for a vocabulary of {c.vocab_size} tokens, "
                f"this target has {target.vocab_size}")
    try:
        layers = stack(target.model)[1]
    except DraftPairError as exc:
        return str(exc).rstrip(".")
    have = {str(getattr(layer, "layer_type", "")) for layer in layers}
    missing = [t for t in model.layer_types if t not in have]
    if missing:
        return f"the Gemma 4 assistant reads {missing[0]} layers, which this target does not have"
    return None


def load(path: Path | str, target: LoadedModel) -> AssistantModel:
    model = load_model(Path(path), dtype=norm_dtype(target.model))
    problem = target_problem(model, target)
    if problem:
        raise DraftPairError(problem[0].upper() + problem[1:] + ".")
    return model


def unavailable(ctx: DrafterContext) -> str | None:
    if ctx.asset is None:
        return "no Gemma 4 assistant is loaded (choose its folder as the draft)"
    problem: str | None = target_problem(ctx.asset, ctx.target)
    return problem


def make(ctx: DrafterContext) -> Gemma4AssistantDrafter:
    if ctx.asset is None:
        raise DraftPairError("No Gemma 4 assistant is loaded.")
    return Gemma4AssistantDrafter(ctx.asset, ctx.target)


class Gemma4AssistantDrafter(Drafter):
    taps = TapRequest(final_postnorm=True, shared_kv=True)

    def __init__(self, model: AssistantModel, target: LoadedModel):
        self.net = model
        self.target_vocab = target.vocab_size
        inner = stack(target.model)[0]
        self.embed = inner.embed_tokens
        self.embed_scale = float(getattr(inner, "embed_scale", 1.0) or 1.0)
        self.window = int(getattr(model.config.text, "sliding_window", 0) or 0)
        self.stochastic = False
        self.sampling = SamplingParams()
        self._kept: Hidden | None = None
        self.n_proposed = self.n_accepted = 0
        self._reset()

    def _reset(self) -> None:
        self.rows: list[mx.array] = []
        self.n_rows = 0
        self.kv: dict[str, SharedKV] | None = None

    def _take(self, hidden: Hidden | None) -> None:
        if hidden is None:
            return
        if hidden.shared_kv is not None:
            self.kv = hidden.shared_kv
        if hidden.n and hidden.final_postnorm is not None:
            self.rows.append(hidden.final_postnorm)
            self.n_rows += int(hidden.final_postnorm.shape[0])

    def _row(self, i: int) -> mx.array:
        if len(self.rows) > 1:
            self.rows = [mx.concatenate(self.rows, axis=0)]
        return self.rows[0][i: i + 1]

    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        self.sampling = sampling
        self.stochastic = not sampling.greedy and not sm.shares_draws(sampling)
        self._reset()
        kept, self._kept = self._kept, None
        self._take(kept)
        return []

    def resume_rows(self, rows: Hidden) -> None:
        self._kept = rows

    def prefill(self, tokens: list[int], hidden: Hidden | None) -> None:
        self._take(hidden)

    def _shared(self, valid: int) -> tuple[dict[str, tuple[mx.array, mx.array]],
                                           dict[str, mx.array | None]] | None:
        if self.kv is None:
            return None
        shared: dict[str, tuple[mx.array, mx.array]] = {}
        masks: dict[str, mx.array | None] = {}
        dtype = self.net.pre_projection.weight.dtype
        for kind, kv in self.kv.items():
            n = int(kv.keys.shape[2])
            extra = kv.end - valid  # positions fed after the committed ones
            if extra < 0 or extra >= n:
                return None
            keys, values = kv.keys[..., : n - extra, :], kv.values[..., : n - extra, :]
            shared[kind] = (keys, values)
            kv_len = n - extra
            masks[kind] = swa_mask(valid - 1, kv_len, valid, self.window, dtype) \
                if kind == "sliding_attention" else None
        if any(t not in shared for t in self.net.layer_types):
            return None
        return shared, masks

    def _pick(self, logits: mx.array, qs: list[mx.array], position: int) -> mx.array:
        logits = logits.reshape(1, -1).astype(mx.float32)
        if self.sampling.greedy:
            return mx.argmax(logits, axis=-1)
        scaled = sm.scaled_logits(logits, self.sampling)
        if not self.stochastic:  # the shared draw at this position
            return sm.draw(scaled, self.sampling, [position])
        qs.append(mx.softmax(scaled, axis=-1))
        return mx.random.categorical(scaled)

    def propose(self, committed: list[int], k: int) -> Proposal | None:
        L = len(committed)
        valid = L - 1  # positions whose K/V the round reads: all but the newest token
        if k <= 0 or valid < 1 or self.n_rows < valid:
            return None
        got = self._shared(valid)
        if got is None:
            return None
        shared, masks = got
        started = time.perf_counter()
        state = self._row(valid - 1)[None]  # (1, 1, H): the state that predicted t_{L-1}
        tok = mx.array([committed[-1]], dtype=mx.uint32)
        qs: list[mx.array] = []
        picks = []
        for j in range(k):
            emb = self.embed(tok[None]) * self.embed_scale
            state, logits = self.net.step(mx.concatenate([emb.astype(state.dtype), state], -1),
                                          shared, masks, valid - 1)
            tok = self._pick(logits, qs, L + j).astype(mx.uint32)
            picks.append(tok)
        tokens = mx.concatenate(picks)
        q = mx.concatenate(qs, axis=0)[:, : self.target_vocab] if qs else None
        mx.async_eval(tokens, *([q] if q is not None else []))
        self.n_proposed += k
        return Proposal(tokens=tokens, q=q, draft_ms=(time.perf_counter() - started) * 1e3)

    def observe(self, committed: list[int], proposal: Proposal | None, accepted: int,
                new_tokens: list[int], hidden: Hidden | None = None) -> None:
        if proposal is not None:
            self.n_accepted += accepted
        self._take(hidden)

    def close(self) -> None:
        self._reset()

    def stats(self) -> dict[str, Any]:
        return {"proposed": self.n_proposed, "accepted": self.n_accepted}
