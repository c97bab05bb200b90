"""Finding and reading MTP head weights, in the layouts real checkpoints use.

- ``qwen3_5``: Qwen3.5 / Qwen3-Next, ``mtp.*`` tensors inside the target's own safetensors
  (``mtp.fc``, ``mtp.pre_fc_norm_embedding``, ``mtp.pre_fc_norm_hidden``, ``mtp.layers.0.*``,
  ``mtp.norm``); config ``mtp_num_hidden_layers`` (maybe under ``text_config``) or
  ``num_nextn_predict_layers``. Hugging Face stores these norms as ``w`` for ``1 + w``.
- ``nextn``: DeepSeek-V3 / GLM-4.5, an extra ``model.layers.{N}`` (N = num_hidden_layers)
  with ``enorm``, ``hnorm``, ``eh_proj``, ``shared_head.{norm,head}`` plus a decoder block;
  config ``num_nextn_predict_layers``. Plain norms.
- ``split``: a drafter folder as mlx-vlm's ``split_mtp`` writes it (``config.json`` with
  ``model_type`` ``qwen3_5_mtp`` ...; ``model.safetensors`` without the ``mtp.`` prefix, norms
  already in ``1 + w`` form).
- ``demo``: the head trained for the demo target (``resources/demo-mtp``): the split layout
  plus ``hidden_state`` in its config and a reduced output head (``draft_head.json``).

mlx-lm drops these tensors when it loads or converts a model (``sanitize``), so they are read
here straight from the files, besides mlx-lm's model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import mlx.nn as nn

QWEN_TYPES = ("qwen3_5", "qwen3_5_moe", "qwen3_next")
NEXTN_TYPES = ("deepseek_v3", "deepseek_v32", "glm4_moe", "glm4_moe_lite")
SPLIT_TYPES = ("qwen3_5_mtp", "draftpair_mtp")
# HF norms of the Qwen family stored as w for (1 + w)
_QWEN_NORM_SUFFIXES = (".input_layernorm.weight", ".post_attention_layernorm.weight",
                       ".q_norm.weight", ".k_norm.weight", "norm.weight",
                       "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight")
_NEXTN_RENAMES = {"enorm": "pre_fc_norm_embedding", "hnorm": "pre_fc_norm_hidden",
                  "eh_proj": "fc", "shared_head.norm": "norm"}
_NEXTN_SHARED = ("embed_tokens", "shared_head.head")


@dataclass
class Found:
    """Where a head's tensors are: layout, files -> source key names, and the config."""

    layout: str
    files: dict[Path, list[str]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = None

    @property
    def n_tensors(self) -> int:
        return sum(len(v) for v in self.files.values())


def read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    return dict(config.get("text_config") or config)


def declared_depth(config: dict[str, Any]) -> int:
    """MTP layers the config declares (0: none)."""
    tc = text_config(config)
    for key in ("mtp_num_hidden_layers", "num_nextn_predict_layers"):
        for c in (tc, config):
            v = c.get(key)
            if v:
                return int(v)
    return 0


def family(config: dict[str, Any]) -> str:
    """The model family (``qwen3_5``, ``deepseek_v3`` ...), from the outer or text config."""
    fam = str(config.get("model_type") or text_config(config).get("model_type") or "")
    if fam.endswith("_mtp") and config.get("text_config"):
        fam = str(config["text_config"].get("model_type") or fam)
    return fam.removesuffix("_text")


def _weight_files(path: Path) -> dict[str, list[str]]:
    """File name -> tensor names, from the index if there is one (no tensor is read)."""
    index = path / "model.safetensors.index.json"
    if index.exists():
        try:
            wm = json.loads(index.read_text()).get("weight_map", {})
        except ValueError:
            wm = {}
        by_file: dict[str, list[str]] = {}
        for key, fname in wm.items():
            by_file.setdefault(fname, []).append(key)
        return by_file
    from safetensors import safe_open

    out: dict[str, list[str]] = {}
    for f in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(f), framework="numpy") as fh:
                out[f.name] = list(fh.keys())
        except Exception:
            continue
    return out


def _nextn_prefix(config: dict[str, Any]) -> str:
    n = int(text_config(config).get("num_hidden_layers", 0))
    return f"model.layers.{n}."


def _selects(layout: str, config: dict[str, Any]) -> Callable[[str], bool]:
    if layout == "qwen3_5":
        return lambda k: k.startswith("mtp.") or k.startswith("model.mtp.")
    prefix = _nextn_prefix(config)
    return lambda k: k.startswith(prefix)


def find_in_target(path: Path, config: dict[str, Any] | None = None) -> Found | None:
    """The target's own MTP tensors, if its files hold any (by name; nothing is read)."""
    config = config if config is not None else read_config(path)
    fam = family(config)
    layout = "qwen3_5" if fam in QWEN_TYPES else "nextn" if fam in NEXTN_TYPES else None
    if layout is None:
        return None
    sel = _selects(layout, config)
    found = Found(layout=layout, config=config, folder=path)
    for fname, keys in _weight_files(path).items():
        mine = [k for k in keys if sel(k)]
        if mine and (path / fname).exists():
            found.files[path / fname] = mine
    return found if found.files else None


def find_split(folder: Path) -> Found | None:
    """A standalone drafter folder (mlx-vlm ``split_mtp`` layout or the demo head)."""
    config = read_config(folder)
    mt = str(config.get("model_type", ""))
    if mt not in SPLIT_TYPES:
        return None
    files = {folder / f: keys for f, keys in _weight_files(folder).items()}
    if not files:
        return None
    return Found(layout="demo" if mt == "draftpair_mtp" else "split", files=files,
                 config=config, folder=folder)


def _is_mlx_file(path: Path) -> bool:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as fh:
            return (fh.metadata() or {}).get("format") == "mlx"
    except Exception:
        return False


def load_tensors(found: Found) -> dict[str, Any]:
    """The head's tensors under ``MTPModule`` names (``fc``, ``layers.0.*``, ...)."""
    from app.engine.mlx_types import load_arrays

    raw: dict[str, Any] = {}
    mlx_format = False
    for f, keys in found.files.items():
        arrays = load_arrays(f)
        mlx_format = mlx_format or _is_mlx_file(f)
        for k in keys:
            if k in arrays:
                raw[k] = arrays[k]
    out: dict[str, Any] = {}
    if found.layout == "qwen3_5":
        for k, v in raw.items():
            name = k.split("mtp.", 1)[1]
            if not mlx_format and name.endswith(_QWEN_NORM_SUFFIXES) and v.ndim == 1:
                v = v + 1.0
            out[name] = v
    elif found.layout == "nextn":
        prefix = _nextn_prefix(found.config)
        for k, v in raw.items():
            name = k[len(prefix):]
            if name.startswith(_NEXTN_SHARED):
                continue  # the target's own embedding and head are used
            for old, new in _NEXTN_RENAMES.items():
                if name.startswith(old + "."):
                    name = new + name[len(old):]
                    break
            else:
                name = "layers.0." + name
            out[name] = v
    else:
        out = dict(raw)
    return _stack_experts(out)


def _stack_experts(w: dict[str, Any]) -> dict[str, Any]:
    """Per-expert HF tensors -> mlx-lm's stacked ``switch_mlp`` (and fused gate_up split)."""
    import mlx.core as mx

    for key in [k for k in w if k.endswith(".experts.gate_up_proj")]:
        base = key[: -len(".experts.gate_up_proj")]
        gate, up = mx.split(w.pop(key), 2, axis=-2)
        w[f"{base}.switch_mlp.gate_proj.weight"] = gate
        w[f"{base}.switch_mlp.up_proj.weight"] = up
        if f"{base}.experts.down_proj" in w:
            w[f"{base}.switch_mlp.down_proj.weight"] = w.pop(f"{base}.experts.down_proj")
    pat = re.compile(r"(.*)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.(weight|scales|biases)$")
    groups: dict[tuple[str, str, str], dict[int, str]] = {}
    for k in w:
        if m := pat.fullmatch(k):
            groups.setdefault((m[1], m[3], m[4]), {})[int(m[2])] = k
    for (base, proj, suffix), experts in groups.items():
        keys = [experts[e] for e in sorted(experts)]
        w[f"{base}.switch_mlp.{proj}.{suffix}"] = mx.stack([w.pop(k) for k in keys])
    return w


def shape_problems(module: nn.Module, tensors: dict[str, Any]) -> list[str]:
    """Names that are missing, unexpected or of the wrong shape for ``module``."""
    from app.engine.mlx_types import flat_arrays

    want = dict(flat_arrays(module.parameters()))
    quantized = any(k.endswith(".scales") for k in tensors)
    problems = []
    for k, v in want.items():
        if k not in tensors:
            problems.append(f"missing {k}")
        elif not quantized and tuple(tensors[k].shape) != tuple(v.shape):
            problems.append(f"{k} is {tuple(tensors[k].shape)}, expected {tuple(v.shape)}")
    extra = [k for k in tensors if k not in want and not k.endswith((".scales", ".biases"))]
    problems += [f"unexpected {k}" for k in extra]
    return problems
