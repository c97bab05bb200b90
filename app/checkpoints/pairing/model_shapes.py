"""The model half of the load check (``load_check``): the model class the installed mlx-lm
would build from config.json, built lazily (nothing allocated), the family's ``sanitize`` and
quantization applied to placeholders made from the safetensors headers, and every parameter's
name and shape compared, each mismatch explained in plain words."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.checkpoints.pairing.report import BLOCKER, NOTE
from app.errors import technical_detail, user_message
from app.fileio import JSON_LIMIT, read_regular_text

if TYPE_CHECKING:
    from app.checkpoints.pairing.load_check import _Out

DTYPES = {
    "F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
    "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8", "BOOL": "bool_",
    "F8_E4M3": "uint8", "F8_E5M2": "uint8", "F8_E8M0": "uint8",
}  # fmt: skip
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def model_classes(p: Path, config: dict, out: _Out):
    from mlx_lm.utils import _get_classes

    if "model_type" not in config:
        out.add("config_keys", BLOCKER,
                f"{p / 'config.json'} lacks model_type, so the kind of model is unknown.",
                "no model_type")
        return None, None
    try:
        return _get_classes(config)
    except ValueError as exc:
        out.add("arch_unsupported", BLOCKER,
                f"The installed mlx-lm cannot run this kind of model "
                f"({config.get('model_type')!r} in {p / 'config.json'}).", technical_detail(exc))
    except Exception as exc:  # noqa: BLE001 - a module that fails to import, odd types
        out.add("arch_unsupported", BLOCKER, user_message(exc, folder=p), technical_detail(exc))
    return None, None


def quant_config_fallbacks(p: Path, config: dict) -> None:
    """The same two fallbacks mlx-lm applies before reading quantization_config."""
    if "quantization_config" not in config:
        text = config.get("text_config", {})
        if isinstance(text, dict) and "quantization_config" in text:
            config["quantization_config"] = text["quantization_config"]
    if "quantization_config" not in config and (p / "hf_quant_config.json").exists():
        try:
            config["quantization_config"] = json.loads(
                read_regular_text(p / "hf_quant_config.json", limit=JSON_LIMIT))
        except (OSError, ValueError):
            pass


_SIMPLE = {"int": (int,), "float": (int, float), "bool": (bool, int), "str": (str,)}


def _type_problems(args_class, config: dict) -> tuple[list[str], list[str]]:
    """(blocking, harmless) type mismatches between config values and ModelArgs fields."""
    blocking: list[str] = []
    harmless: list[str] = []
    if not dataclasses.is_dataclass(args_class):
        return blocking, harmless
    for f in dataclasses.fields(args_class):
        if f.name not in config or not f.init:
            continue
        ann = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        ann = ann.replace(" ", "")
        optional = ann.startswith("Optional[") or "None" in ann
        base = ann[len("Optional["):-1] if ann.startswith("Optional[") else ann.split("|")[0]
        if base not in _SIMPLE:
            continue
        value = config[f.name]
        if value is None:
            if not optional and f.default is not None:
                blocking.append(f"{f.name} is empty (null) but must be {_kind(base)}")
            continue
        ok = isinstance(value, _SIMPLE[base]) and not (base in ("int", "float")
                                                         and isinstance(value, bool))
        if base == "bool" and isinstance(value, int) and value not in (0, 1):
            ok = False
        if ok:
            continue
        blocking.append(f"{f.name} is {json.dumps(value)[:40]} but must be {_kind(base)}")
    return blocking, harmless


def _kind(base: str) -> str:
    return {"int": "a whole number", "float": "a number", "bool": "true or false",
            "str": "text"}[base]


def build_model(p: Path, config: dict, model_class, args_class, out: _Out):
    cfg = p / "config.json"
    mt = config.get("model_type")
    try:
        args = args_class.from_dict(config)
    except Exception as exc:  # noqa: BLE001 - missing keys, __post_init__ checks
        out.add("config_keys", BLOCKER, user_message(exc, folder=p, model_type=mt),
                technical_detail(exc))
        return None
    blocking, harmless = _type_problems(args_class, config)
    for text in harmless:
        out.add("config_types", NOTE, f"In {cfg}, {text}; mlx-lm accepts it.", text)
    try:
        model = model_class(args)
    except Exception as exc:  # noqa: BLE001 - wrong types surface here
        msg = user_message(exc, folder=p, model_type=mt)
        if blocking:
            msg = f"{cfg} has settings of the wrong type: {'; '.join(blocking)}."
        elif msg.rstrip(".") == str(exc).strip().splitlines()[0].rstrip("."):  # not recognised
            msg = f"A {mt} model cannot be built from the settings in {cfg} ({msg.rstrip('.')})."
        out.add("config_types", BLOCKER, msg, technical_detail(exc))
        return None
    if blocking:
        out.add("config_types", BLOCKER,
                f"{cfg} has settings of the wrong type: {'; '.join(blocking)}; the model "
                "would fail on its first token.", "; ".join(blocking))
        return None
    return model


def _placeholders(headers: dict[str, tuple[str, tuple[int, ...]]]) -> dict[str, Any]:
    """Zero-stride lazy arrays with each tensor's dtype and shape: no memory, no reads."""
    import mlx.core as mx

    zeros = {d: mx.zeros((), dtype=getattr(mx, d)) for d in set(DTYPES.values())}
    return {name: mx.broadcast_to(zeros[DTYPES[dt]], shape) for name, (dt, shape) in headers.items()}


def compare_weights(p: Path, config: dict, model, headers, out: _Out) -> None:
    from mlx.utils import tree_flatten

    weights = _placeholders(headers)
    try:
        if hasattr(model, "sanitize"):
            weights = model.sanitize(weights)
        _quantize(model, config, weights)
    except Exception as exc:  # noqa: BLE001
        out.add("weights_layout", BLOCKER,
                f"The weights in {p} do not have the layout a {config.get('model_type')} model "
                f"expects: {user_message(exc, folder=p)}", technical_detail(exc))
        return
    params: list[tuple[str, Any]] = []
    tree_flatten(model.parameters(), destination=params)  # the list form, by name
    expected = {k: tuple(v.shape) for k, v in params}
    got = {k: tuple(v.shape) for k, v in weights.items()}
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    wrong = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])
    _explain_layers(p, config, expected, missing, extra, out)
    _explain_vocab(p, config, expected, got, wrong, out)
    if missing and not out.blocked():
        out.add("weights_missing", BLOCKER,
                f"The weights in {p} lack {len(missing)} tensor(s) the model in config.json needs "
                f"(for example {', '.join(missing[:3])}).", ", ".join(missing[:20]))
    if extra and not out.blocked():
        out.add("weights_extra", BLOCKER,
                f"The weights in {p} hold {len(extra)} tensor(s) the model in config.json does "
                f"not have (for example {', '.join(extra[:3])}).", ", ".join(extra[:20]))
    if wrong and not out.blocked():
        k = wrong[0]
        out.add("weights_shape", BLOCKER,
                f"{len(wrong)} tensor(s) in {p} have other shapes than config.json describes "
                f"(for example {k}: {got[k]} in the file, {expected[k]} expected).",
                "; ".join(f"{n}: file {got[n]} vs model {expected[n]}" for n in wrong[:20]))
    if out.blocked():
        return
    try:  # the real assignment, still lazy: catches anything the comparison did not
        model.eval()
        model.load_weights(list(weights.items()), strict=True)
    except Exception as exc:  # noqa: BLE001
        out.add("weights_mismatch", BLOCKER, user_message(exc, folder=p), technical_detail(exc))


def _explain_layers(p: Path, config: dict, expected: dict, missing: list[str], extra: list[str],
                    out: _Out) -> None:
    if not missing and not extra:
        return
    prefixes = {k[: m.start()] for k in expected if (m := _LAYER.search(k))}

    def layers(keys: list[str]) -> set[int]:  # decoder layers only (not e.g. mtp.layers.N)
        return {int(m.group(1)) for k in keys
                if (m := _LAYER.search(k)) and k[: m.start()] in prefixes}

    in_missing, in_extra = layers(missing), layers(extra)
    if len(in_missing) + len(in_extra) == 0:
        return
    declared = config.get("num_hidden_layers", config.get("n_layer"))
    if in_missing and not in_extra:
        out.add("layer_count", BLOCKER,
                f"config.json in {p} describes {declared} layers but the weights hold only "
                f"{min(in_missing)}.", f"no weights for layers {sorted(in_missing)[:10]}")
    elif in_extra and not in_missing:
        out.add("layer_count", BLOCKER,
                f"config.json in {p} describes {declared} layers but the weights hold "
                f"{max(in_extra) + 1}.", f"weights for undeclared layers {sorted(in_extra)[:10]}")


def _explain_vocab(p: Path, config: dict, expected, got, wrong: list[str], out: _Out) -> None:
    for k in wrong:
        if "embed" in k or k.startswith("lm_head") or k.endswith("wte.weight"):
            rows_file, rows_model = got[k][0], expected[k][0]
            if rows_file != rows_model:
                out.add("vocab_size", BLOCKER,
                        f"config.json in {p} says the vocabulary has {config.get('vocab_size')} "
                        f"tokens but the weights hold {rows_file}.",
                        f"{k}: file {got[k]} vs model {expected[k]}")
                return


def _quantize(model, config: dict, weights: dict) -> None:
    """mlx-lm's quantization step, on placeholders (lazy: nothing is computed)."""
    import mlx.nn as nn
    from mlx_lm import utils as U

    def apply(quantization: dict) -> None:
        per_layer = config.get("quantization") or {}

        def predicate(path, module):
            if isinstance(per_layer, dict) and path in per_layer:
                return per_layer[path]
            if not hasattr(module, "to_quantized") or f"{path}.scales" not in weights:
                return False
            params = U.infer_quant_config(path, module, weights)
            taker = getattr(U, "_takes_global_scale", None)
            if f"{path}.global_scale" in weights and taker is not None and taker(module):
                params["global_scale"] = True
            return params

        nn.quantize(model, group_size=quantization["group_size"], bits=quantization["bits"],
                    mode=quantization.get("mode", "affine"), class_predicate=predicate)

    if (q := config.get("quantization")) is not None:
        apply(q)
        return
    qc = config.get("quantization_config")
    if not qc:
        return
    method = qc["quant_method"]
    fixed = {"mxfp4": {"group_size": 32, "bits": 4, "mode": "mxfp4"},
             "mxfp8": {"group_size": 32, "bits": 8, "mode": "mxfp8"}}
    if method in fixed:
        apply(fixed[method])
    elif method == "compressed-tensors":
        apply(U._compressed_tensors_quantization(qc))
    elif method in ("awq", "gptq"):
        new, q = U._transform_awq_weights(weights, qc)
        weights.clear()
        weights.update(new)
        apply(q)
    elif method == "modelopt":
        settings = qc.get("quantization", qc)
        if settings["quant_algo"] != "NVFP4":
            raise ValueError(f"unsupported modelopt quant_algo {settings['quant_algo']}")
        apply({"group_size": settings.get("group_size", 16), "bits": 4, "mode": "nvfp4"})
