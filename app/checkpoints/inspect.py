"""What a checkpoint folder is, from its config, tokenizer files and safetensors headers.

Public API:
    inspect_checkpoint(path) -> CheckpointInfo      never raises for a bad folder: problems are data
    CheckpointInfo: kind (KIND_*), unsupported_reason, architecture, param_count, weight_bytes,
                    dtype, quantization, vocab_size, context_length, has_chat_template, ...
    mlx_lm_supports(model_type, architectures) -> tuple[bool, str]
    dflash_config(config) -> dict | None            both DFlash config layouts
    mtp_weights(tensor names, config) -> list[str]

No weights are loaded, nothing is imported from mlx.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from app.checkpoints.eagle3_config import eagle3_config
from app.checkpoints.gemma4_assistant_config import is_gemma4_assistant
from app.checkpoints.safetensors_header import WeightsSummary, layer_index, summarize_weights
from app.checkpoints.tokenizer_files import TokenizerInfo, read_chat_template, read_tokenizer
from app.fileio import JSON_LIMIT, read_regular_text

KIND_CHAT = "chat"
KIND_BASE = "base"  # no chat template: chats as plain text, and can draft where it pairs
KIND_DRAFT = "draft-candidate"
KIND_DFLASH = "dflash"
KIND_EAGLE3 = "eagle3-drafter"
KIND_GEMMA4_ASSISTANT = "gemma4-assistant-drafter"
KIND_MTP_TARGET = "mtp-target"
KIND_UNSUPPORTED = "unsupported"
TARGET_KINDS = (KIND_CHAT, KIND_BASE, KIND_MTP_TARGET)  # what can be chatted with
DRAFTER_FOLDER_KINDS = (KIND_DFLASH, KIND_EAGLE3, KIND_GEMMA4_ASSISTANT)  # drafters that only help their target

KIND_LABELS = {  # plain names; the technical name (``kind``) stays in tooltips and the CLI
    KIND_CHAT: "chat model",
    KIND_BASE: "base model (plain text)",
    KIND_DRAFT: "draft model",
    KIND_DFLASH: "block drafter (DFlash)",
    KIND_EAGLE3: "layer-reading drafter (EAGLE-3)",
    KIND_GEMMA4_ASSISTANT: "Gemma 4 assistant (MTP drafter)",
    KIND_MTP_TARGET: "chat model with its own drafter (MTP)",
    KIND_UNSUPPORTED: "unsupported",
}
KIND_EXPLAIN = {  # one line each, for a person who has never heard of speculative decoding
    KIND_CHAT: "A model you can chat with; pick a draft beside it to reply faster.",
    KIND_BASE: "A model without a chat template: it continues text, and chat joins the turns "
               "as plain text. It can also draft for a larger model with the same tokens.",
    KIND_DRAFT: "A small model that only guesses tokens for a larger one; it is not meant "
                "for chatting on its own.",
    KIND_DFLASH: "Guesses a whole block of tokens at once for the one model it was made for; "
                 "it cannot chat.",
    KIND_EAGLE3: "Guesses the next few tokens for the one model it was made for, reading "
                 "three of that model's layers; it does not chat on its own.",
    KIND_GEMMA4_ASSISTANT: "Guesses the next few tokens for the Gemma 4 model it was "
                           "published with; it does not chat on its own.",
    KIND_MTP_TARGET: "A chat model that carries its own extra prediction layer (a "
                     "multi-token-prediction head), so it needs no separate draft.",
    KIND_UNSUPPORTED: "DraftPair cannot use this folder; the reason is shown beside it.",
}

# Families whose checkpoints can ship multi-token-prediction heads.
MTP_FAMILIES = {"qwen3_5", "qwen3_5_moe", "qwen3_next", "deepseek_v3", "glm4_moe", "mimo"}


def read_json_file(path: Path) -> tuple[Any, str | None]:
    """(data, plain error or None)."""
    try:
        return json.loads(read_regular_text(path, limit=JSON_LIMIT)), None
    except FileNotFoundError:
        return None, f"{path.name} is missing."
    except UnicodeDecodeError:
        return None, f"{path.name} is not text (it holds binary data)."
    except OSError as exc:
        from app.errors import user_message

        return None, f"{path.name} cannot be read: {user_message(exc)}"
    except RecursionError:
        return None, f"{path.name} nests too deeply to be read."
    except json.JSONDecodeError as exc:
        return None, f"{path.name} is not valid JSON (line {exc.lineno}, column {exc.colno})."


def text_config(config: dict) -> dict:
    """Top-level config with a nested ``text_config`` (multimodal checkpoints) merged over it."""
    inner = config.get("text_config")
    if isinstance(inner, dict):
        merged = dict(config)
        merged.update(inner)
        return merged
    return config


@lru_cache(maxsize=1)
def _mlx_lm_models_dir() -> tuple[Path | None, dict[str, str], str | None]:
    spec = importlib.util.find_spec("mlx_lm")
    if spec is None or not spec.submodule_search_locations:
        return None, {}, None
    root = Path(next(iter(spec.submodule_search_locations)))
    remap: dict[str, str] = {}
    try:  # read mlx-lm's own remapping table without importing mlx
        tree = ast.parse((root / "utils.py").read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "MODEL_REMAPPING" for t in node.targets
            ):
                remap = ast.literal_eval(node.value)
    except (OSError, SyntaxError, ValueError):
        pass
    version = None
    try:
        ns: dict[str, str] = {}
        exec((root / "_version.py").read_text(encoding="utf-8"), ns)  # noqa: S102 - a version string
        version = ns.get("__version__")
    except (OSError, SyntaxError):
        pass
    return root / "models", remap, version


def mlx_lm_model_type(model_type: str) -> str:
    _, remap, _ = _mlx_lm_models_dir()
    return remap.get(model_type, model_type)


def mlx_lm_supports(
    model_type: str | None, architectures: list[str] | None = None
) -> tuple[bool, str]:
    """Whether the installed mlx-lm has a module for this family; (ok, detail)."""
    models_dir, _, version = _mlx_lm_models_dir()
    if models_dir is None:
        return False, "mlx-lm is not installed"
    if not model_type:
        return False, "config.json has no model_type"
    mapped = mlx_lm_model_type(model_type)
    ok = (models_dir / f"{mapped}.py").is_file()
    via = f" (as {mapped})" if mapped != model_type else ""
    return (
        ok,
        f"mlx-lm {version or '?'}: model_type {model_type!r}{via} {'found' if ok else 'not found'} in mlx_lm.models",
    )


def dflash_config(config: dict) -> dict | None:
    """Normalized DFlash settings (old and June-2026 layouts), or None if not a DFlash drafter."""
    archs = config.get("architectures") or []
    archs = [str(a) for a in archs] if isinstance(archs, list) else [str(archs)]
    inner = config.get("dflash_config")
    if not (isinstance(inner, dict) or "DFlashDraftModel" in archs):
        return None
    inner = inner if isinstance(inner, dict) else {}
    given = config.get("rope_parameters")
    rope: dict[str, Any] = given if isinstance(given, dict) else {}
    return {
        "block_size": inner.get("block_size", config.get("block_size")),
        "mask_token_id": inner.get("mask_token_id", config.get("mask_token_id")),
        "target_layer_ids": inner.get("target_layer_ids", config.get("target_layer_ids")),
        "num_target_layers": config.get("num_target_layers", inner.get("num_target_layers")),
        "hidden_size": config.get("hidden_size"),
        "rope_theta": rope.get("rope_theta", config.get("rope_theta")),
        "layout": "2026-06" if "block_size" in inner or rope else "original",
    }


def mtp_weights(names: list[str] | set[str], config: dict) -> list[str]:
    """Tensor names that belong to a multi-token-prediction head."""
    cfg = text_config(config)
    n_layers = cfg.get("num_hidden_layers")
    out = []
    for name in names:
        bare = name.removeprefix("language_model.").removeprefix("model.language_model.")
        if bare.startswith(("mtp.", "model.mtp.")) or ".mtp." in bare:
            out.append(name)
            continue
        idx = layer_index(bare)
        if idx is not None and isinstance(n_layers, int) and idx >= n_layers:
            out.append(name)  # DeepSeek-V3 style: extra layers after the decoder stack
        elif bare.endswith(("eh_proj.weight", "enorm.weight", "hnorm.weight")):
            out.append(name)
    return out


_READABLE_HF_QUANT = {
    "bitnet",
    "mxfp4",
    "mxfp8",
    "fp8",
    "compressed-tensors",
    "modelopt",
    "awq",
    "gptq",
}


def quantization_summary(config: dict) -> tuple[str | None, str | None]:
    """(human label, plain problem if mlx-lm cannot read it)."""
    cfg = text_config(config)
    q = cfg.get("quantization")
    if isinstance(q, dict):
        bits, group, mode = q.get("bits"), q.get("group_size"), q.get("mode", "affine")
        return f"{bits}-bit {mode} (group {group})", None
    qc = cfg.get("quantization_config")
    if isinstance(qc, dict):
        method = str(qc.get("quant_method") or "unknown")
        if method in _READABLE_HF_QUANT:
            if method == "fp8" and not (
                qc.get("scale_fmt") == "ue8m0"
                and list(qc.get("weight_block_size") or ()) == [32, 32]
            ):
                return "fp8", "its FP8 quantization layout cannot be read by mlx-lm"
            return method, None
        return (
            method,
            f"its {method} quantization cannot be read by mlx-lm (convert an unquantized copy)",
        )
    return None, None


@dataclass
class CheckpointInfo:
    path: Path
    config: dict | None = None
    config_error: str | None = None
    weights: WeightsSummary | None = None
    tokenizer: TokenizerInfo | None = None
    kind: str = KIND_UNSUPPORTED
    unsupported_reason: str | None = None
    model_type: str | None = None
    architectures: list[str] = field(default_factory=list)
    arch_supported: bool = False
    arch_detail: str = ""
    vocab_size: int | None = None  # declared in config
    embedding_rows: int | None = None  # from the headers
    context_length: int | None = None
    quantization: str | None = None
    quantization_problem: str | None = None
    has_chat_template: bool = False
    chat_template: str | None = None
    mtp_tensors: list[str] = field(default_factory=list)
    dflash: dict | None = None
    eagle3: dict | None = None
    draft_head_ids: list[int] | None = None
    draft_head_error: str | None = None
    remote_code: bool = False

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def param_count(self) -> int | None:
        return self.weights.param_count if self.weights and self.weights.files else None

    @property
    def weight_bytes(self) -> int:
        return self.weights.weight_bytes if self.weights else 0

    @property
    def dtype(self) -> str | None:
        cfg = text_config(self.config or {})
        declared = cfg.get("torch_dtype") or cfg.get("dtype")
        if isinstance(declared, str):
            return declared
        main = self.weights.main_dtype() if self.weights else None
        return {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}.get(main or "", main)

    @property
    def effective_vocab(self) -> int | None:
        return self.vocab_size or self.embedding_rows

    @property
    def kind_label(self) -> str:
        return KIND_LABELS.get(self.kind, self.kind)

    @property
    def kind_explain(self) -> str:
        return KIND_EXPLAIN.get(self.kind, "")

    def cfg(self) -> dict:
        return text_config(self.config or {})


EMBED_NAMES = (
    "model.embed_tokens.weight",
    "embed_tokens.weight",
    "model.language_model.embed_tokens.weight",
    "language_model.model.embed_tokens.weight",
    "transformer.wte.weight",
    "backbone.embeddings.weight",
    "lm_head.weight",
)


def _embedding_rows(weights: WeightsSummary | None) -> int | None:
    if not weights:
        return None
    for name in EMBED_NAMES:
        t = weights.tensors.get(name)
        if t and t.shape:
            return t.shape[0]
    return None


def read_draft_head(folder: Path) -> tuple[list[int] | None, str | None]:
    path = folder / "draft_head.json"
    if not path.is_file():
        return None, None
    data, err = read_json_file(path)
    if err:
        return None, err
    if not isinstance(data, dict) or data.get("format") != 1:
        return None, "draft_head.json has an unknown format (expected format 1)."
    ids = data.get("token_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and i >= 0 for i in ids):
        return None, "draft_head.json has no valid token_ids list."
    return ids, None


def inspect_checkpoint(
    path: str | os.PathLike[str], *, read_tokenizer_files: bool = True
) -> CheckpointInfo:
    """Describe a checkpoint folder. Never raises for bad contents."""
    path = Path(path).expanduser()
    try:
        return _inspect(path, read_tokenizer_files)
    except Exception as exc:  # noqa: BLE001 - odd values in a config we did not foresee
        info = CheckpointInfo(path=path)
        from app.errors import user_message

        info.unsupported_reason = (
            f"DraftPair could not understand this folder's settings: {user_message(exc, folder=path)}"
        )
        return info


def _inspect(path: Path, read_tokenizer_files: bool) -> CheckpointInfo:
    info = CheckpointInfo(path=path)
    if not path.is_dir():
        info.unsupported_reason = (
            "The folder does not exist."
            if not path.exists()
            else "This is a file, not a model folder."
        )
        return info
    config, err = read_json_file(path / "config.json")
    if err or not isinstance(config, dict):
        info.config_error = err or "config.json is not a JSON object."
        info.unsupported_reason = info.config_error
        return info
    info.config = config
    cfg = text_config(config)
    # mlx-lm picks the architecture by the outer model_type (Qwen3.5's text_config says
    # "qwen3_5_text", which is not a module of its own)
    mt = config.get("model_type") or cfg.get("model_type")
    info.model_type = mt if isinstance(mt, str) else None
    archs = config.get("architectures") or cfg.get("architectures") or []
    info.architectures = [str(a) for a in archs] if isinstance(archs, list) else [str(archs)]
    info.remote_code = bool(config.get("auto_map") or config.get("model_file"))
    info.weights = summarize_weights(path, config)
    info.embedding_rows = _embedding_rows(info.weights)
    vs = cfg.get("vocab_size")
    info.vocab_size = int(vs) if isinstance(vs, int) and vs > 0 else None
    for key in (
        "max_position_embeddings",
        "max_sequence_length",
        "seq_length",
        "n_positions",
        "model_max_length",
    ):
        v = cfg.get(key)
        if isinstance(v, int) and v > 0:
            info.context_length = v
            break
    info.quantization, info.quantization_problem = quantization_summary(config)
    info.arch_supported, info.arch_detail = mlx_lm_supports(info.model_type, info.architectures)
    info.dflash = dflash_config(config)
    info.eagle3 = eagle3_config(config)
    info.mtp_tensors = mtp_weights(list(info.weights.tensors), config) if info.weights else []
    info.draft_head_ids, info.draft_head_error = read_draft_head(path)
    if read_tokenizer_files:
        info.tokenizer = read_tokenizer(path)
        info.chat_template = info.tokenizer.chat_template if info.tokenizer else None
    else:
        tok_cfg, _ = read_json_file(path / "tokenizer_config.json")
        info.chat_template = read_chat_template(
            path, tok_cfg if isinstance(tok_cfg, dict) else None
        )
    info.has_chat_template = bool(info.chat_template)
    info.kind, info.unsupported_reason = _classify(info)
    return info


def _classify(info: CheckpointInfo) -> tuple[str, str | None]:
    w = info.weights
    if w and w.errors and any("listed in the index is missing" in e for e in w.errors):
        return KIND_UNSUPPORTED, (
            "Some of its weight files are missing (an interrupted download?); "
            "download it again to resume."
        )
    if info.dflash is not None:
        if w and w.errors:
            return KIND_UNSUPPORTED, w.errors[0]
        return KIND_DFLASH, None
    if info.eagle3 is not None:
        if w is None or not w.files:
            return KIND_UNSUPPORTED, "There are no .safetensors weight files in this folder."
        if w.errors:
            return KIND_UNSUPPORTED, w.errors[0]
        return KIND_EAGLE3, None
    if info.config is not None and is_gemma4_assistant(info.config):
        if w is None or not w.files:
            return KIND_UNSUPPORTED, "There are no .safetensors weight files in this folder."
        return (KIND_UNSUPPORTED, w.errors[0]) if w.errors else (KIND_GEMMA4_ASSISTANT, None)
    if w is None or not w.files:
        if w and w.pickle_files:
            return KIND_UNSUPPORTED, (
                "Its weights are only in pickle files (.bin/.pt), which DraftPair never loads; "
                "convert a safetensors copy."
            )
        return KIND_UNSUPPORTED, "There are no .safetensors weight files in this folder."
    if w.errors:
        return KIND_UNSUPPORTED, w.errors[0]
    if info.config and info.config.get("model_file"):
        return KIND_UNSUPPORTED, "It needs custom Python code to run, which DraftPair never runs."
    names = list(w.tensors)
    if names and info.mtp_tensors and len(info.mtp_tensors) == len(names):
        return KIND_UNSUPPORTED, "It holds only a multi-token-prediction head, not a full model."
    if not info.arch_supported:
        return KIND_UNSUPPORTED, (
            f"The installed mlx-lm cannot run {info.model_type or 'this architecture'} models."
        )
    if info.quantization_problem:
        return KIND_UNSUPPORTED, f"It cannot be loaded: {info.quantization_problem}."
    if info.draft_head_error:
        return KIND_UNSUPPORTED, info.draft_head_error
    if info.tokenizer is None and not (info.path / "tokenizer_config.json").is_file():
        if info.draft_head_ids is not None:
            return KIND_DRAFT, None
        return KIND_UNSUPPORTED, "It has no tokenizer files."
    if info.mtp_tensors:
        return KIND_MTP_TARGET, None
    if info.draft_head_ids is not None:
        return KIND_DRAFT, None  # a reduced output head cannot emit every token: draft only
    if info.has_chat_template:
        return KIND_CHAT, None
    return KIND_BASE, None  # a base model: plain-text chat, and a draft where it pairs
