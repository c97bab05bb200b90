"""Building an MTP head for a loaded target, and saying plainly why there is none.

Search order for a target folder: a drafter folder given directly (mlx-vlm ``split_mtp``
layout or the demo head), the target's own safetensors, a drafter folder ``<target>/mtp``
(either layout; ``draftpair models fetch-mtp`` and ``models convert`` put a head there), and
for the built-in demo target the head shipped in ``resources/demo-mtp``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlx.core as mx
import mlx.nn as nn

from app.engine.drafters import mtp_weights as mw
from app.engine.drafters.mtp_head import (
    HIDDEN_BY_FAMILY,
    POSTNORM,
    PRENORM,
    MTPHead,
    MTPModule,
    attention_layer_index,
    inner_model,
    new_layer_like,
    text_args,
)
from app.errors import DraftPairError

if TYPE_CHECKING:
    from app.engine.models import LoadedModel

SUPPORTED = "Qwen3.5, Qwen3-Next, DeepSeek-V3 / GLM-4.5 NextN"


def _builtin_head(target: LoadedModel) -> tuple[bool, Path | None]:
    """(is this a built-in target with its own head, that head's folder if present)."""
    from app.checkpoints import builtins

    for b in builtins.registered():
        head = builtins.get(f"{b.name}-mtp")
        if head is None:
            continue
        path = b.present()
        try:
            same = path is not None and Path(path).resolve() == Path(target.path).resolve()
        except OSError:
            same = False
        if same:
            return True, head.present()
    return False, None


def locate(path: Path, target: LoadedModel) -> tuple[mw.Found | None, str | None]:
    """(where the head is, None) or (None, why there is none)."""
    found = mw.find_split(path)
    if found is not None:
        return found, None
    config = target.config if Path(target.path) == path else mw.read_config(path)
    found = mw.find_in_target(path, config)
    if found is not None:
        return found, None
    sub = mw.find_split(path / "mtp") or mw.find_in_target(path / "mtp")
    if sub is not None:
        return sub, None
    builtin, head = _builtin_head(target)
    if builtin:
        if head is not None and mw.find_split(head) is not None:
            return mw.find_split(head), None
        return None, ("The MTP head trained for the demo is not included in this build "
                      "(draftpair demo mtp-train builds one).")
    name = Path(path).name
    fam = mw.family(config) or "?"
    if mw.declared_depth(config) > 0:
        return None, (f"{name} declares an MTP layer but its files hold no MTP weights: this "
                      "conversion dropped them (mlx-lm removes them when it converts); "
                      f"`draftpair models fetch-mtp {name}` fetches only the head from the "
                      "source model, and `draftpair models convert` keeps it.")
    return None, (f"{name} ({fam}) has no MTP head; MTP drafting needs a target that ships "
                  f"one ({SUPPORTED}) or the built-in demo target.")


def build_module(target_model: nn.Module) -> MTPModule:
    args = text_args(target_model)
    return MTPModule(new_layer_like(target_model), int(args.hidden_size),
                     float(getattr(args, "rms_norm_eps", 1e-6)))


def _hidden_setting(found: mw.Found, target: LoadedModel) -> str:
    own = found.config.get("hidden_state")
    if own in (PRENORM, POSTNORM):
        return str(own)
    fam = mw.family(found.config) if found.layout == "split" else mw.family(target.config)
    return HIDDEN_BY_FAMILY.get(fam, POSTNORM)


def _quantize_like(module: MTPModule, tensors: dict[str, Any], config: dict[str, Any]) -> None:
    q = config.get("quantization") or config.get("quantization_config") or {}
    group, bits = int(q.get("group_size", 64)), int(q.get("bits", 4))

    def pred(p: str, m: nn.Module) -> bool | dict[str, Any]:
        if f"{p}.scales" not in tensors or not hasattr(m, "to_quantized"):
            return False
        own = q.get(p) or q.get(f"mtp.{p}")
        if isinstance(own, dict):
            return {"group_size": own.get("group_size", group), "bits": own.get("bits", bits)}
        return True

    nn.quantize(module, group_size=group, bits=bits, class_predicate=pred)


def _reduced_head(folder: Path | None, target_model: nn.Module
                  ) -> tuple[mx.array | None, mx.array | None]:
    if folder is None or not (folder / "draft_head.json").exists():
        return None, None
    from app.engine.models import dequantized_weight

    ids = sorted({int(i) for i in json.loads((folder / "draft_head.json").read_text())
                  .get("token_ids", [])})
    if not ids:
        return None, None
    lm = getattr(target_model, "language_model", target_model)
    layer = getattr(lm, "lm_head", None) or inner_model(target_model).embed_tokens
    arr = mx.array(ids, dtype=mx.uint32)
    w = dequantized_weight(layer, arr).astype(inner_model(target_model).norm.weight.dtype)
    mx.eval(w)
    return arr, w


def _sanitize_block(tensors: dict[str, Any], target_model: nn.Module) -> dict[str, Any]:
    """A NextN block in HF naming -> the target family's MLX naming, by passing it through
    the target's own ``sanitize`` as if it were its last decoder layer (fused or split
    projections, stacked experts, fp8 scales: whatever that family does)."""
    sanitize = getattr(target_model, "sanitize", None)
    if sanitize is None:
        return tensors
    idx = attention_layer_index(target_model)
    block = {f"model.layers.{idx}.{k[len('layers.0.'):]}": v
             for k, v in tensors.items() if k.startswith("layers.0.")}
    try:
        done = sanitize(dict(block))
    except Exception:
        return tensors
    prefix = f"model.layers.{idx}."
    out = {k: v for k, v in tensors.items() if not k.startswith("layers.0.")}
    out.update({"layers.0." + k[len(prefix):]: v for k, v in done.items() if k.startswith(prefix)})
    return out


def head_from(found: mw.Found, target: LoadedModel) -> MTPHead:
    """Read the tensors of ``found`` into a head for ``target``; DraftPairError on mismatch."""
    tensors = mw.load_tensors(found)
    if found.layout == "nextn":
        tensors = _sanitize_block(tensors, target.model)
    try:
        module = build_module(target.model)
    except (AttributeError, TypeError, ValueError) as exc:
        raise DraftPairError(
            f"MTP drafting does not support the layers of {target.model_type} targets "
            f"({exc}).") from None
    if any(k.endswith(".scales") for k in tensors):
        _quantize_like(module, tensors, found.config)
    problems = mw.shape_problems(module, tensors)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise DraftPairError(
            f"The MTP weights of {Path(found.folder or '.').name} do not fit the target: "
            f"{'; '.join(problems[:3])}{more}.")
    module.load_weights(list(tensors.items()), strict=False)
    dtype = inner_model(target.model).norm.weight.dtype
    if not any(k.endswith(".scales") for k in tensors):
        module.set_dtype(dtype)
    mx.eval(module.parameters())  # type: ignore[no-untyped-call]  # MLX is not annotated
    ids, w = _reduced_head(found.folder if found.layout == "demo" else None, target.model)
    src = {"qwen3_5": "the target's own files", "nextn": "the target's own files (NextN)",
           "split": f"the drafter folder {found.folder}",
           "demo": "the head trained for the demo"}[found.layout]
    return MTPHead(module=module, hidden_state=_hidden_setting(found, target), source=src,
                   layout=found.layout, head_ids=ids, head_weight=w,
                   info={"tensors": found.n_tensors, "config": found.config},
                   path=Path(found.folder) if found.folder and found.layout in ("split", "demo")
                   else None)


def load_head(path: Path, target: LoadedModel) -> MTPHead:
    found, why = locate(path, target)
    if found is None:
        raise DraftPairError(why or "No MTP head was found.")
    return head_from(found, target)


def problem_for(target: LoadedModel) -> str | None:
    """Why MTP cannot run for this target (None if it can). Reads names, not tensors."""
    try:
        inner_model(target.model)
        new_layer_like(target.model)
    except (AttributeError, TypeError, ValueError):
        return (f"MTP drafting does not support {target.model_type} targets "
                f"(supported: {SUPPORTED} and the demo target).")
    _, why = locate(Path(target.path), target)
    return why
