"""DSpark drafter network: DFlash's block drafter (the same layers, context K/V and target LM
head) plus a low-rank token-transition head: each block position's logits get
``markov_w2(markov_w1(previous token))`` added before its token is picked, left to right.
With ``sample_from_anchor`` (the default) the anchor's own state proposes the first token, so
a block of ``proposal_length`` inputs ``[anchor, MASK x (P - 1)]`` proposes ``P`` tokens.

Settings as mlx-vlm 0.7.10 reads them (``speculative/drafters/dspark/config.py``): the
checkpoint's ``block_size`` is the proposal count (plus one with ``dspark_bonus_anchor``);
``markov_rank``, ``sample_from_anchor``, ``swa_window_size`` in ``dflash_config``. Causal
blocks and attention-sink biases are refused (DraftPair's block pass has neither).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from app.checkpoints.dspark_config import MODEL_TYPE
from app.engine.drafters.dflash_model import DFlashConfig, DFlashModel, read_config
from app.engine.drafters.folder_weights import fill, read_config_json, read_weights
from app.errors import DraftPairError


@dataclass(frozen=True)
class DSparkExtras:
    proposal_length: int
    markov_rank: int
    sample_from_anchor: bool = True
    confidence_head: bool = False
    confidence_with_markov: bool = True


def read_dspark(cfg: Mapping[str, Any]) -> tuple[DFlashConfig, DSparkExtras]:
    d_raw = cfg.get("dflash_config")
    d: Mapping[str, Any] = d_raw if isinstance(d_raw, Mapping) else {}
    if d.get("projector_type") not in (None, MODEL_TYPE):
        raise DraftPairError(f"This DSpark drafter's projector ({d.get('projector_type')}) "
                             "is not one DraftPair runs.")
    if d.get("markov_head_type", "vanilla") != "vanilla":
        raise DraftPairError("This DSpark drafter's token-transition head is not one "
                             "DraftPair runs.")
    if d.get("causal") or cfg.get("dflash_query_causal") or d.get("attention_sink_bias"):
        raise DraftPairError("This DSpark drafter uses causal blocks or attention sinks, "
                             "which DraftPair does not run yet.")
    flat = dict(cfg)
    if "swa_window_size" in d:
        flat["sliding_window"] = int(d["swa_window_size"])
    raw_block = d.get("block_size", cfg.get("block_size"))
    if not isinstance(raw_block, int) or raw_block < 1:
        raise DraftPairError("This DSpark drafter's config.json has no valid block_size.")
    proposals = raw_block - (1 if cfg.get("dspark_bonus_anchor") else 0)
    sfa = bool(d.get("sample_from_anchor", True))
    inner = dict(d)
    # DraftPair's block: the drafting pass's inputs (anchor + masks)
    inner["block_size"] = max(2, proposals + (0 if sfa else 1))
    flat["dflash_config"] = inner
    config = read_config(flat)
    rank = d.get("markov_rank", 256)
    if not isinstance(rank, int) or rank <= 0:
        raise DraftPairError("This DSpark drafter's markov_rank is not a positive number.")
    return config, DSparkExtras(
        proposal_length=proposals, markov_rank=rank, sample_from_anchor=sfa,
        confidence_head=bool(d.get("enable_confidence_head", False)),
        confidence_with_markov=bool(d.get("confidence_head_with_markov", True)))


class MarkovHead(nn.Module):
    def __init__(self, vocab: int, rank: int):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.markov_w1 = nn.Embedding(vocab, rank)
        self.markov_w2 = nn.Linear(rank, vocab, bias=False)

    def step(self, logits: mx.array, previous: mx.array) -> mx.array:
        out: mx.array = logits + self.markov_w2(self.markov_w1(previous))
        return out


class ConfidenceHead(nn.Module):
    """Shipped by some checkpoints (a width controller's input); loaded, not used."""

    def __init__(self, hidden: int, rank: int, with_markov: bool):
        super().__init__()  # type: ignore[no-untyped-call]  # MLX is not annotated
        self.proj = nn.Linear(hidden + rank if with_markov else hidden, 1, bias=True)


class DSparkModel(DFlashModel):
    def __init__(self, config: DFlashConfig, extras: DSparkExtras):
        super().__init__(config)
        self.extras = extras
        self.markov_head = MarkovHead(config.vocab_size, extras.markov_rank)
        if extras.confidence_head:
            self.confidence_head = ConfidenceHead(config.hidden_size, extras.markov_rank,
                                                  extras.confidence_with_markov)


@dataclass
class DSparkWeights:
    model: DSparkModel
    embed: mx.array | None  # the drafter's own embedding, when its folder ships one


def load_model(folder: Path, dtype: mx.Dtype | None = None) -> DSparkWeights:
    folder = Path(folder)
    cfg = read_config_json(folder, "the DSpark drafter")
    if not isinstance(cfg, dict):
        raise DraftPairError(f"The DSpark drafter's config.json in {folder} is not a table.")
    config, extras = read_dspark(cfg)
    weights = {k.removeprefix("model."): v
               for k, v in read_weights(folder, "the DSpark drafter").items()}
    embed = weights.pop("embed_tokens.weight", None)
    weights.pop("lm_head.weight", None)  # the target's head is used, as mlx-vlm binds it
    model = DSparkModel(config, extras)
    fill(model, weights, folder, "the DSpark drafter", dtype)
    if dtype is not None:
        embed = embed.astype(dtype) if embed is not None else None
    mx.eval(model.parameters())  # type: ignore[no-untyped-call]  # MLX is not annotated
    return DSparkWeights(model=model, embed=embed)
