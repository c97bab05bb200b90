"""Memory estimate for a target (+ draft) at a context length, against a budget.

Public API:
    memory_budget() -> Budget          Metal: recommended working set; else 75% of RAM (psutil)
    kv_bytes_per_token(info) -> int
    estimate_memory(target, draft=None, *, context, draft_kind=None, width=None,
                    budget=None) -> MemoryEstimate
    format_bytes(n) -> str

Figures come from safetensors headers and config only; nothing is loaded.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import asdict, dataclass

from app.checkpoints.inspect import CheckpointInfo, text_config
from app.units import format_bytes  # noqa: F401 - part of this module's API

RAM_FRACTION = 0.75
DTYPE_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
PREFILL_CHUNK = 2048




@dataclass(frozen=True)
class Budget:
    bytes: int
    source: str  # what the number is, in words
    available_bytes: int | None = None  # free right now (informative)


def memory_budget() -> Budget:
    if sys.platform == "darwin" and platform.machine() == "arm64":
        try:
            import mlx.core as mx

            info = mx.device_info() if hasattr(mx, "device_info") else mx.metal.device_info()
            ws = int(info.get("max_recommended_working_set_size", 0))
            if ws > 0:
                return Budget(ws, "Metal recommended working set", _available())
        except Exception:  # noqa: BLE001 - fall back to RAM below
            pass
    try:
        import psutil

        total = int(psutil.virtual_memory().total)
    except Exception:  # noqa: BLE001
        return Budget(0, "unknown (psutil unavailable)")
    return Budget(int(total * RAM_FRACTION), f"{int(RAM_FRACTION * 100)}% of RAM", _available())


def _available() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001
        return None


def _act_bytes(info: CheckpointInfo) -> int:
    if info.quantization:
        return 2  # quantized models compute (and cache) in half precision
    return DTYPE_SIZE.get(str(info.dtype or "float16"), 2)


def _int(cfg: dict, key: str, default: int = 0) -> int:
    """A size from a config: a positive whole number, else ``default`` (odd values are data)."""
    v = cfg.get(key)
    if isinstance(v, float) and v.is_integer() and 0 < v < 2**53:
        v = int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else default


def attention_layers(cfg: dict) -> int:
    n = _int(cfg, "num_hidden_layers", 0)
    lt = cfg.get("layer_types")
    if isinstance(lt, list) and lt:
        return sum(1 for t in lt if "attention" in str(t) and "linear" not in str(t))
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return n // interval
    return n


def kv_bytes_per_token(info: CheckpointInfo, *, context: int | None = None) -> int:
    cfg = info.cfg()
    heads = _int(cfg, "num_attention_heads", 0)
    kv_heads = _int(cfg, "num_key_value_heads", heads)
    hidden = _int(cfg, "hidden_size", 0)
    head_dim = _int(cfg, "head_dim", (hidden // heads if heads else 0))
    if cfg.get("kv_lora_rank"):  # MLA caches a compressed latent instead of K/V
        per_layer = _int(cfg, "kv_lora_rank", 0) + _int(cfg, "qk_rope_head_dim", 0)
        return attention_layers(cfg) * per_layer * _act_bytes(info)
    return 2 * attention_layers(cfg) * kv_heads * head_dim * _act_bytes(info)


@dataclass(frozen=True)
class MemoryEstimate:
    target_weights: int
    target_kv: int
    draft_weights: int
    draft_kv: int
    scratch: int
    context: int
    budget: int
    budget_source: str
    available: int | None

    @property
    def total(self) -> int:
        return (
            self.target_weights + self.target_kv + self.draft_weights + self.draft_kv + self.scratch
        )

    @property
    def drafter_cost(self) -> int:
        return self.draft_weights + self.draft_kv

    @property
    def fits(self) -> bool:
        return self.budget <= 0 or self.total <= self.budget

    def lines(self) -> list[str]:
        f = format_bytes
        out = [
            f"target weights {f(self.target_weights)}",
            f"target KV cache at {self.context} tokens {f(self.target_kv)}",
        ]
        if self.drafter_cost:
            out += [f"draft weights {f(self.draft_weights)}", f"draft KV cache {f(self.draft_kv)}"]
        out += [
            f"verify/prefill scratch {f(self.scratch)}",
            f"total {f(self.total)} vs budget {f(self.budget)} ({self.budget_source})",
        ]
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d["total"] = self.total
        d["fits"] = self.fits
        return d


def _scratch(info: CheckpointInfo, context: int, width: int) -> int:
    cfg = info.cfg()
    hidden = _int(cfg, "hidden_size", 0)
    inter = _int(cfg, "intermediate_size", 4 * hidden)
    heads = _int(cfg, "num_attention_heads", 1)
    vocab = info.effective_vocab if isinstance(info.effective_vocab, int) else 0
    chunk = min(context, PREFILL_CHUNK)
    act = _act_bytes(info)
    prefill = chunk * (4 * hidden + 2 * inter) * act + heads * chunk * min(context, chunk) * 4
    verify_logits = (width + 2) * vocab * 4 * 2  # logits + softmax copies
    return prefill + verify_logits


def one_layer_kv_bytes(info: CheckpointInfo, context: int) -> int:
    """K/V of a single attention layer shaped like ``info``'s, at ``context`` tokens (a
    prediction head's own cache)."""
    cfg = text_config(info.config or {})
    heads = _int(cfg, "num_key_value_heads", _int(cfg, "num_attention_heads", 0))
    hidden = _int(cfg, "hidden_size", 0)
    head_dim = _int(cfg, "head_dim", hidden // max(_int(cfg, "num_attention_heads", 1), 1))
    return 2 * heads * head_dim * _act_bytes(info) * context


def estimate_memory(
    target: CheckpointInfo,
    draft: CheckpointInfo | None = None,
    *,
    context: int,
    draft_kind: str | None = None,
    width: int | None = None,
    budget: Budget | None = None,
) -> MemoryEstimate:
    """Both weights, both caches and the verify scratch; the draft kind (a registered one, or
    None for a plain draft folder) says what its drafter keeps."""
    from app import kinds

    budget = budget or memory_budget()
    plugin = kinds.find(draft_kind)
    width = width or (plugin.scratch_width if plugin is not None else 8)
    t_kv = kv_bytes_per_token(target) * context
    d_w = draft.weight_bytes if draft is not None else 0
    own = plugin.draft_kv_bytes(target, draft, context) if plugin is not None else None
    if own is not None:
        d_kv = own
    else:
        d_kv = kv_bytes_per_token(draft) * context if draft is not None else 0
    scratch = _scratch(target, context, width) + (_scratch(draft, context, width) if draft else 0)
    return MemoryEstimate(
        target_weights=target.weight_bytes,
        target_kv=t_kv,
        draft_weights=d_w,
        draft_kv=d_kv,
        scratch=scratch,
        context=context,
        budget=budget.bytes,
        budget_source=budget.source,
        available=budget.available_bytes,
    )
