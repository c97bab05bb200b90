"""Loading checkpoints with mlx-lm, choosing precision per backend, cache capabilities."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from app.checkpoints.config_ranges import config_range_problem, remote_code_tokenizer
from app.checkpoints.load_errors import explain_load_failure, tokenizer_failure
from app.engine.mlx_types import flat_arrays
from app.errors import ModelLoadError, technical_detail, user_message
from app.fileio import JSON_LIMIT, read_regular_text, special_files

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


@dataclass
class LoadedModel:
    name: str
    path: Path
    model: nn.Module
    tokenizer: Any  # mlx_lm TokenizerWrapper
    config: dict[str, Any]
    precision: str  # e.g. "float32", "4-bit (group 32)"
    load_seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", "?"))

    @property
    def vocab_size(self) -> int:
        """Rows of the output layer (may exceed the tokenizer's size: padded embeddings)."""
        return int(self.config.get("vocab_size") or len(self.tokenizer.get_vocab()))

    @property
    def embedding_rows(self) -> int:
        """Token ids the model can read: the rows of its input embedding table. An id at or
        past it would read memory past the table (MLX does not check), so callers refuse it."""
        rows = self.extra.get("embedding_rows")
        if rows is None:
            rows = embedding_rows(self.model) or self.vocab_size
            self.extra["embedding_rows"] = rows
        return int(rows)

    @property
    def eos_token_ids(self) -> set[int]:
        return set(self.tokenizer.eos_token_ids or [])

    def weight_bytes(self) -> int:
        return sum(v.nbytes for _, v in flat_arrays(self.model.parameters()))


_EMBEDDING_NAMES = ("embed_tokens", "embeddings", "wte", "tok_embeddings", "word_embeddings")


def embedding_rows(model: nn.Module) -> int | None:
    """Rows of ``model``'s input embedding table (quantized tables keep one row per id), or
    None when no known layout holds one."""
    lm = getattr(model, "language_model", model)
    for owner in (getattr(lm, "model", None), getattr(lm, "transformer", None), lm):
        for name in _EMBEDDING_NAMES:
            layer = getattr(owner, name, None) if owner is not None else None
            weight = getattr(layer, "weight", None)
            if isinstance(weight, mx.array) and weight.ndim == 2:
                return int(weight.shape[0])
    return None


def validate_folder(path: Path) -> dict[str, Any]:
    """Cheap checks before handing a folder to mlx-lm; returns config.json."""
    if not path.exists():
        raise ModelLoadError(f"No model folder at {path}.")
    if not path.is_dir():
        raise ModelLoadError(f"{path} is a file; a model is a folder with config.json.")
    for name, kind in special_files(path)[:1]:  # mlx-lm would open it and wait forever
        raise ModelLoadError(f"{name} in {path} is {kind}, not an ordinary file, so "
                             "DraftPair does not load this folder.")
    cfg_path = path / "config.json"
    if not cfg_path.exists() and not cfg_path.is_symlink():
        raise ModelLoadError(f"{path} has no config.json, so it is not a model checkpoint.")
    try:
        config = json.loads(read_regular_text(cfg_path, limit=JSON_LIMIT))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(user_message(exc, file=cfg_path),
                             detail=technical_detail(exc)) from None
    if not isinstance(config, dict):
        raise ModelLoadError(f"config.json in {path} is not a JSON object.")
    problem = config_range_problem(config, f"config.json in {path}")
    if problem:
        raise ModelLoadError(problem)
    if "DFlashDraftModel" in (config.get("architectures") or []) or isinstance(
            config.get("dflash_config"), dict):
        raise ModelLoadError(
            f"{path.name} is a DFlash drafter, not a chat model: it only drafts for the model "
            "it was made for (choose it as that model's draft).")
    from app.checkpoints.eagle3_config import is_eagle3
    from app.checkpoints.gemma4_assistant_config import is_gemma4_assistant

    if is_eagle3(config) or is_gemma4_assistant(config):
        family = "an EAGLE-3 drafter" if is_eagle3(config) else "a Gemma 4 assistant"
        raise ModelLoadError(
            f"{path.name} is {family}, not a chat model: it only drafts for the model "
            "it was made for (choose it as that model's draft).")
    weights = list(path.glob("*.safetensors"))
    if not weights:
        pickles = [p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES]
        if pickles:
            raise ModelLoadError(
                f"{path} only has PyTorch pickle weights ({pickles[0]}); DraftPair never loads "
                "pickles. Convert it to safetensors first (draftpair models convert)."
            )
        raise ModelLoadError(f"{path} has no .safetensors weights.")
    return config


def _precision_of(model: nn.Module, config: dict[str, Any]) -> str:
    dense = sorted({str(v.dtype).replace("mlx.core.", "")
                    for _, m in model.named_modules() if "scales" not in m
                    for v in m.values() if isinstance(v, mx.array) and v.ndim >= 2})
    quant = [m for _, m in model.named_modules() if "scales" in m]
    if not quant:
        dtypes = {str(v.dtype).replace("mlx.core.", "")
                  for _, v in flat_arrays(model.parameters())}
        return "/".join(sorted(dtypes))
    if any(isinstance(m, nn.QuantizedLinear) for m in quant) or not dense:
        q = config.get("quantization") or config.get("quantization_config") or {}
        bits = q.get("bits", quant[0].bits) if isinstance(q, dict) else quant[0].bits
        group = q.get("group_size", quant[0].group_size) if isinstance(q, dict) else "?"
        return f"{bits}-bit (group {group})"
    emb = quant[0]
    return f"{'/'.join(dense)} + {emb.bits}-bit embedding"


def dequantized_weight(layer: nn.Module, rows: mx.array | None = None) -> mx.array:
    """The weight of an embedding or linear layer (only ``rows`` if given), dequantized if
    the layer is quantized; the result takes the dtype of its scales."""
    def pick(a: mx.array) -> mx.array:
        return a if rows is None else a[rows]

    if "scales" not in layer:
        return pick(layer.weight)
    biases = pick(layer["biases"]) if "biases" in layer else None
    out: mx.array = mx.dequantize(pick(layer.weight), pick(layer.scales), biases,
                                  group_size=layer.group_size, bits=layer.bits,
                                  mode=getattr(layer, "mode", "affine"))
    return out


def _cast_dense(model: nn.Module, dtype: mx.Dtype) -> None:
    """Cast the floating-point arrays of unquantized modules; quantized ones keep theirs."""
    for _, m in model.named_modules():
        if "scales" in m:
            continue
        for k, v in list(m.items()):
            if isinstance(v, mx.array) and mx.issubdtype(v.dtype, mx.floating) and v.dtype != dtype:
                m[k] = v.astype(dtype)


# On the CPU backend MLX's quantized matmul is slower than float32, so quantized linear layers
# of a small model (a draft) are expanded to float32 when the expansion stays under this size.
EXPAND_QUANTIZED_LIMIT = 256 * 2**20


def _expand_small_quantized(model: nn.Module, limit: int = EXPAND_QUANTIZED_LIMIT) -> int:
    """Replace quantized linear layers by float32 ones if their total float32 size is under
    ``limit`` bytes; returns the number of layers expanded. Embeddings stay quantized (their
    lookup is a gather; a reduced draft head dequantizes only its rows)."""
    from mlx.utils import tree_unflatten

    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)]
    size = sum(m.scales.size * m.group_size * 4 for _, m in layers)
    if not layers or size > limit:
        return 0
    new = []
    for name, m in layers:
        w = dequantized_weight(m).astype(mx.float32)
        lin = nn.Linear(w.shape[1], w.shape[0], bias="bias" in m)
        lin.weight = w
        if "bias" in m:
            lin.bias = m.bias.astype(mx.float32)
        new.append((name, lin))
    model.update_modules(tree_unflatten(new))
    return len(new)


def load_model(
    path: str | Path, *, precision: str = "auto", backend: str | None = None
) -> LoadedModel:
    """Load a checkpoint folder with mlx-lm (names are resolved by the caller:
    ``app.checkpoints.resolve.resolve_model``).

    ``precision="auto"``: on the CPU backend unquantized half-precision weights are cast to
    float32 (the fastest there); on Metal/CUDA weights stay as stored. ``"float32"``,
    ``"float16"``, ``"bfloat16"`` force a cast of unquantized weights.
    """
    from mlx_lm.utils import load_model as mlx_load_model
    from mlx_lm.utils import load_tokenizer

    started = time.perf_counter()
    path = Path(path).expanduser()
    config = validate_folder(path)
    try:
        model, config = mlx_load_model(path, lazy=False, trust_remote_code=False)
    except ValueError as exc:
        msg = str(exc)
        if "not supported" in msg or "Model type" in msg:
            raise ModelLoadError(
                f"The architecture '{config.get('model_type', '?')}' of {path.name} is not "
                "supported by the installed mlx-lm."
            ) from None
        raise explain_load_failure(exc, path) from None
    except Exception as exc:  # corrupt safetensors, missing tensors...
        raise explain_load_failure(exc, path) from None
    needs_code = remote_code_tokenizer(path)
    if needs_code:
        raise ModelLoadError(f"The tokenizer in {path} needs its own Python code ({needs_code}), "
                             "which DraftPair never runs.")
    try:  # never asks on the terminal whether to run the checkpoint's code: it does not
        tokenizer = load_tokenizer(path, {"trust_remote_code": False},
                                   eos_token_ids=config.get("eos_token_id"))
    except Exception as exc:
        raise ModelLoadError(tokenizer_failure(exc, path), detail=technical_detail(exc)) from None

    quantized = bool(config.get("quantization") or config.get("quantization_config"))
    if backend is None:
        from app.engine.platform import detect_backend

        backend = detect_backend()
    target_dtype = None
    if precision == "auto":
        if backend == "cpu":
            target_dtype = mx.float32
    elif precision in ("float32", "float16", "bfloat16"):
        target_dtype = getattr(mx, precision)
    # A quantized model is cast only when its linear layers were expanded (a small draft);
    # quantized modules keep their scales either way.
    expanded = (target_dtype is not None and quantized and precision == "auto"
                and _expand_small_quantized(model) > 0)
    if target_dtype is not None and (not quantized or expanded):
        _cast_dense(model, target_dtype)
        mx.eval(model.parameters())
    return LoadedModel(
        name=path.name,
        path=path,
        model=model,
        tokenizer=tokenizer,
        config=config,
        precision=_precision_of(model, config),
        load_seconds=time.perf_counter() - started,
    )


def make_cache(loaded: LoadedModel) -> list[Any]:
    from mlx_lm.models.cache import make_prompt_cache

    return make_prompt_cache(loaded.model)


def trim(cache: list[Any], n: int) -> None:
    if n <= 0:
        return
    for c in cache:
        c.trim(n)
