"""Medusa heads: K extra heads on the target's last hidden state, each guessing one token
further ahead, verified as a tree of their top candidates.

The layout is FasterDecoding's (``medusa_num_heads`` heads, each ``medusa_num_layers``
residual blocks ``x + SiLU(W x + b)`` then its own LM head, no bias), on the state the
target's LM head reads (after the final norm). Head ``i`` reads the row of position ``p``
(whose own LM head guesses token ``p + 1``, the pending one) and guesses token ``p + 2 + i``.
Their per-head top candidates make a tree (the most probable prefixes first, ``tree_build``),
sized by this machine's verify costs; the walk rule verifies it exactly. Weights are a
folder with ``config.json`` (the two fields) and ``*.safetensors`` named
``medusa_head.{i}.{j}.linear.{weight,bias}`` and ``medusa_head.{i}.{layers}.weight``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from app.engine import sampling as sm
from app.engine import tree_build
from app.engine.drafter_context import DrafterContext
from app.engine.drafters.base import Drafter
from app.engine.events import SamplingParams
from app.engine.mlx_types import float_rows, int_rows, load_arrays
from app.engine.models import LoadedModel
from app.engine.proposal import Proposal
from app.engine.taps import Hidden, TapRequest
from app.errors import DraftPairError

TOP_K = 4  # candidates per head
MAX_NODES = 32


class ResBlock(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.linear = nn.Linear(hidden, hidden)

    def __call__(self, x: mx.array) -> mx.array:
        out: mx.array = x + nn.silu(self.linear(x))
        return out


class MedusaHeads(nn.Module):
    def __init__(self, hidden: int, vocab: int, num_heads: int, num_layers: int):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.num_layers = num_layers
        self.medusa_head = [
            [*(ResBlock(hidden) for _ in range(num_layers)), nn.Linear(hidden, vocab, bias=False)]
            for _ in range(num_heads)
        ]

    def __call__(self, h: mx.array) -> mx.array:
        """Logits ``(K, V)`` of every head for one state ``h`` ``(H,)``."""
        outs = []
        for head in self.medusa_head:
            x = h
            for layer in head:
                x = layer(x)
            outs.append(x)
        return mx.stack(outs)


@dataclass
class MedusaAssets:
    path: Path
    heads: MedusaHeads
    num_heads: int
    num_layers: int


def read_config(path: Path) -> tuple[int, int]:
    cfg = json.loads((path / "config.json").read_text())
    try:
        return int(cfg["medusa_num_heads"]), int(cfg.get("medusa_num_layers", 1))
    except (KeyError, TypeError, ValueError) as e:
        raise DraftPairError("This Medusa folder's config.json does not say how many heads "
                             "it has (medusa_num_heads).") from e


def load(path: Path | str, target: LoadedModel) -> MedusaAssets:
    """Load a Medusa head folder for ``target``; a plain DraftPairError if they do not fit."""
    path = Path(path)
    n_heads, n_layers = read_config(path)
    weights: dict[str, mx.array] = {}
    for f in sorted(path.glob("*.safetensors")):
        weights.update(load_arrays(f))
    lm = weights.get(f"medusa_head.0.{n_layers}.weight")
    if lm is None:
        raise DraftPairError("This Medusa folder holds no head weights.")
    vocab, hidden = (int(s) for s in lm.shape)
    if vocab > target.vocab_size:
        raise DraftPairError("These Medusa heads guess tokens the target does not have.")
    heads = MedusaHeads(hidden, vocab, n_heads, n_layers)
    heads.load_weights(list(weights.items()))
    mx.eval(heads.parameters())  # type: ignore[no-untyped-call]  # MLX is not annotated
    return MedusaAssets(path, heads, n_heads, n_layers)


def unavailable(ctx: DrafterContext) -> str | None:
    if ctx.asset is None:
        return "no Medusa heads are loaded (choose a Medusa head folder as the draft)"
    return None


def make(ctx: DrafterContext) -> MedusaDrafter:
    if ctx.asset is None:
        raise DraftPairError("No Medusa heads are loaded.")
    return MedusaDrafter(ctx.asset, target_vocab=ctx.target.vocab_size)


class MedusaDrafter(Drafter):
    taps = TapRequest(final_postnorm=True)
    block = True  # every head reads one state: a round costs one pass of the heads
    adaptive_width = False  # the tree's size is chosen here, from the verify costs

    def __init__(self, assets: MedusaAssets, *, target_vocab: int):
        self.assets = assets
        self.target_vocab = target_vocab
        self.last: mx.array | None = None  # the newest row (its LM head guesses the pending)
        self.n_rows = 0
        self.trees = True
        self.verify_costs: dict[int, float] = {}

    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        self.last, self.n_rows = None, 0
        # a tree's branches would each need their own penalty history: chains then
        self.trees = not sm.make_processors(sampling)
        return []

    def _take(self, hidden: Hidden | None) -> None:
        if hidden is None or hidden.final_postnorm is None or hidden.n == 0:
            return
        self.last = hidden.final_postnorm[-1]
        self.n_rows += hidden.n

    def prefill(self, tokens: list[int], hidden: Hidden | None) -> None:
        self._take(hidden)

    def resume_rows(self, rows: Hidden) -> None:
        self._take(rows)

    def set_verify_costs(self, costs: dict[int, float]) -> None:
        self.verify_costs = dict(costs)

    def _verify_cost(self, n: int) -> float:
        if n in self.verify_costs:
            return self.verify_costs[n]
        if self.verify_costs:  # past the table: its widest entry's slope
            top = max(self.verify_costs)
            slope = (self.verify_costs[top] - 1.0) / max(top - 1, 1)
            return 1.0 + slope * (n - 1)
        return tree_build.linear_cost(0.06)(n, 0)

    def propose(self, committed: list[int], k: int) -> Proposal | None:
        # only while the pending token is the one the newest row guesses
        if self.last is None or self.n_rows != len(committed) - 1 or k <= 0:
            return None
        started = time.perf_counter()
        logits = self.assets.heads(self.last.astype(mx.float32))[: max(1, k)]
        probs = mx.softmax(logits.astype(mx.float32), axis=-1)
        kk = min(TOP_K, probs.shape[-1] - 1)
        top = mx.argpartition(-probs, kth=kk - 1, axis=-1)[:, :kk]
        top_p = mx.take_along_axis(probs, top, axis=-1)
        order = mx.argsort(-top_p, axis=-1)
        top = mx.take_along_axis(top, order, axis=-1)
        top_p = mx.take_along_axis(top_p, order, axis=-1)
        mx.eval(top, top_p)
        toks, ps = int_rows(top), float_rows(top_p)
        if not self.trees:
            toks, ps = [row[:1] for row in toks], [row[:1] for row in ps]
        tokens, parents, values = tree_build.best_first(toks, ps, MAX_NODES)
        n = tree_build.best_size(values, self._verify_cost, at_least=1)
        tokens, parents = tokens[:n], parents[:n]
        spine = 0
        while spine < len(parents) and parents[spine] == spine - 1:
            spine += 1
        chain = spine == len(parents)
        return Proposal(tokens=mx.array(tokens, dtype=mx.uint32),
                        parents=None if chain else tuple(parents),
                        spine=None if chain else spine,
                        draft_ms=(time.perf_counter() - started) * 1e3)

    def observe(self, committed: list[int], proposal: Proposal | None, accepted: int,
                new_tokens: list[int], hidden: Hidden | None = None) -> None:
        self._take(hidden)

    def stats(self) -> dict[str, Any]:
        return {"heads": self.assets.num_heads, "layers": self.assets.num_layers}
