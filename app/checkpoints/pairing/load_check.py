"""Predict whether mlx-lm will load a checkpoint folder, without reading its weights.

Public API:
    load_check(folder, role="model", *, tokenizer="load") -> list[Finding]
        builds the model class the installed mlx-lm would build from config.json (lazily:
        parameters are unevaluated arrays, nothing is allocated), applies the family's
        ``sanitize`` and quantization to placeholders made from the safetensors headers, and
        compares every parameter's name and shape; checks config keys and value types and the
        tokenizer files (tokenizer="load": also loads the tokenizer as the app does, no
        weights; "files": only parses the files; None: skip). Every finding that would stop
        the load is a blocker. Never raises. Results are kept per folder until one of its
        files changes (name, size or time), so repeated checks are instant.
    would_load(findings) -> bool
    refuse_unloadable(folder) -> None      raises DraftPairError when it would not load (imports)
    with_load_check(report) -> PairingReport   a pairing report plus these findings

It follows ``mlx_lm.utils.load_model`` step by step (same helpers, same order), so what it
passes loads, and what fails to load was a blocker.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from app.checkpoints.config_ranges import config_range_problem, remote_code_tokenizer
from app.checkpoints.pairing.report import BLOCKER, NOTE, Finding
from app.checkpoints.safetensors_header import PICKLE_SUFFIXES, HeaderError, read_header
from app.errors import DraftPairError, technical_detail, user_message
from app.fileio import JSON_LIMIT, read_regular_text, special_files

_DTYPES = {
    "F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
    "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8", "BOOL": "bool_",
    "F8_E4M3": "uint8", "F8_E5M2": "uint8", "F8_E8M0": "uint8",
}  # fmt: skip
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


class _Out:
    def __init__(self, role: str):
        self.role = role
        self.who = {"target": "The target", "draft": "The draft"}.get(role, "The model")
        self.items: list[Finding] = []

    def add(self, code: str, severity: str, message: str, detail: str = "") -> None:
        self.items.append(Finding(f"{self.role}.load.{code}", severity, message, detail))

    def blocked(self) -> bool:
        return any(f.severity == BLOCKER for f in self.items)


def would_load(findings: list[Finding]) -> bool:
    return not any(f.severity == BLOCKER for f in findings)


def with_load_check(report):
    """``report`` (a PairingReport) with the load check's findings for its target and, for a
    pair whose draft is a model of its own, its draft; findings already in the report are not added twice."""
    from dataclasses import replace

    from app.checkpoints.inspect import DRAFTER_FOLDER_KINDS, inspect_checkpoint
    from app.checkpoints.pairing.report import verdict_of

    new: list[Finding] = []
    roles = [("target", report.target)]
    from app import kinds

    plugin = kinds.find(report.kind)
    if report.draft is not None and plugin is not None and plugin.draft_is_lm:
        roles.append(("draft", report.draft))
    for role, path in roles:
        if any(f.severity == BLOCKER and f.code.startswith(role + ".") for f in report.findings):
            continue  # already refused for a plainer reason
        if inspect_checkpoint(path, read_tokenizer_files=False).kind in DRAFTER_FOLDER_KINDS:
            continue
        new += [f for f in load_check(path, role) if f not in report.findings]
    if not new:
        return report
    findings = tuple(report.findings) + tuple(new)
    return replace(report, findings=findings, verdict=verdict_of(findings))


def refuse_unloadable(folder: Path) -> None:
    """Raise DraftPairError (the first reason, all of them in ``detail``) when ``folder``
    would not load. DFlash drafters are not mlx-lm models: the pairing check judges them."""
    from app.checkpoints.inspect import DRAFTER_FOLDER_KINDS, inspect_checkpoint

    if inspect_checkpoint(folder, read_tokenizer_files=False).kind in DRAFTER_FOLDER_KINDS:
        return
    blockers = [f for f in load_check(folder) if f.severity == BLOCKER]
    if blockers:
        more = f" ({len(blockers) - 1} more problem(s) with -v)" if len(blockers) > 1 else ""
        raise DraftPairError(
            f"{folder} was not imported because it would not load: {blockers[0].message}{more}",
            detail="\n".join(f"{f.code}: {f.message} [{f.detail}]" for f in blockers),
        )


_CACHE: OrderedDict[tuple, list[Finding]] = OrderedDict()
_CACHE_MAX = 32
_CACHE_LOCK = threading.Lock()


def _fingerprint(p: Path) -> tuple | None:
    """Names, sizes and times of the folder's files: a changed file is checked again."""
    try:
        return tuple(sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns)
                            for e in os.scandir(p) if e.is_file()))
    except OSError:
        return None


def load_check(folder: str | os.PathLike[str], role: str = "model", *,
               tokenizer: str | None = "load") -> list[Finding]:
    p = Path(folder)
    stamp = _fingerprint(p)
    key = (str(p.resolve()) if stamp is not None else None, role, tokenizer, stamp)
    if stamp is not None:
        with _CACHE_LOCK:
            if key in _CACHE:
                _CACHE.move_to_end(key)
                return list(_CACHE[key])
    out = _Out(role)
    try:
        _check(p, out, tokenizer)
    except Exception as exc:  # noqa: BLE001 - a file we did not foresee is a finding
        out.add("unexpected", BLOCKER,
                f"DraftPair could not make sense of {folder}: {user_message(exc, folder=p)}",
                technical_detail(exc))
    if stamp is not None:
        with _CACHE_LOCK:
            _CACHE[key] = list(out.items)
            while len(_CACHE) > _CACHE_MAX:
                _CACHE.popitem(last=False)
    return out.items


def _check(p: Path, out: _Out, tokenizer: str | None) -> None:
    if not _folder_ok(p, out):
        return
    config = _config(p, out)
    if config is None:
        return
    if config.get("model_file"):
        out.add("remote_code", BLOCKER,
                f"{out.who} in {p} needs its own Python code to run, which DraftPair never runs.",
                f"config.json model_file={config['model_file']!r}")
        return
    headers = _headers(p, out)
    if tokenizer:
        _tokenizer_files(p, out)
    model_class, args_class = _classes(p, config, out)
    if model_class is not None and headers is not None:
        _quant_config_fallbacks(p, config)
        model = _build(p, config, model_class, args_class, out)
        if model is not None:
            _compare(p, config, model, headers, out)
    if tokenizer == "load" and not out.blocked():
        _tokenizer_load(p, out)
    elif tokenizer == "files" and not out.blocked():
        _decimal_counts(p, config, out)


def _folder_ok(p: Path, out: _Out) -> bool:
    try:
        os.stat(p)
        if not p.is_dir():
            out.add("not_folder", BLOCKER, f"{p} is a file; a model is a folder with config.json.",
                    str(p))
            return False
        os.listdir(p)
    except OSError as exc:
        out.add("folder_unreadable", BLOCKER, user_message(exc, file=p), technical_detail(exc))
        return False
    for name, kind in special_files(p)[:1]:  # reading it could wait forever, or never end
        out.add("special_file", BLOCKER, f"{name} in {p} is {kind}, not an ordinary file, "
                "so DraftPair does not load this folder.", f"{name}: {kind}")
        return False
    return True


def _config(p: Path, out: _Out) -> dict | None:
    cfg_path = p / "config.json"
    try:
        from mlx_lm.utils import load_config

        config = load_config(p)  # what the real load reads (with generation_config.json)
    except FileNotFoundError as exc:
        if exc.filename and Path(exc.filename).name != "config.json":
            out.add("config_unreadable", BLOCKER, user_message(exc), technical_detail(exc))
        else:
            out.add("no_config", BLOCKER,
                    f"{p} has no config.json, so it is not a model checkpoint.", str(cfg_path))
        return None
    except (OSError, ValueError, RecursionError) as exc:
        out.add("config_unreadable", BLOCKER, user_message(exc, file=cfg_path),
                technical_detail(exc))
        return None
    except AttributeError as exc:  # generation_config.json that is not an object
        out.add("config_unreadable", BLOCKER,
                f"{p / 'generation_config.json'} is not a JSON object.", technical_detail(exc))
        return None
    if not isinstance(config, dict):
        out.add("config_not_object", BLOCKER,
                f"{cfg_path} is not a JSON object (it holds a {type(config).__name__} value).",
                f"top-level JSON type {type(config).__name__}")
        return None
    problem = config_range_problem(config, f"config.json in {p}")
    if problem:  # before any model is built: a zero or a huge count fails deep inside mlx-lm
        out.add("config_range", BLOCKER, problem, problem)
        return None
    return config


def _headers(p: Path, out: _Out) -> dict[str, tuple[str, tuple[int, ...]]] | None:
    files = sorted(f for f in p.glob("model*.safetensors"))
    if not files:
        others = sorted(f.name for f in p.glob("*.safetensors"))
        pickles = sorted(f.name for f in p.iterdir() if f.suffix in PICKLE_SUFFIXES)
        if others:
            out.add("weights_misnamed", BLOCKER,
                    f"mlx-lm reads only weight files named model*.safetensors; {p} has "
                    f"{', '.join(others[:3])}.", ", ".join(others))
        elif pickles:
            out.add("pickle_only", BLOCKER,
                    f"{out.who}'s weights in {p} are in an unsafe format (pickle) that DraftPair "
                    "never opens; convert it to safetensors first.", ", ".join(pickles))
        else:
            out.add("no_weights", BLOCKER, f"{p} has no weight files (*.safetensors).", str(p))
        return None
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    bad = False
    for f in files:
        try:
            header = read_header(f)
        except HeaderError as exc:
            out.add("weights_damaged", BLOCKER,
                    f"{f} is truncated or not a safetensors file: {exc}", str(exc))
            bad = True
            continue
        for name, t in header.tensors.items():
            if t.dtype not in _DTYPES:
                out.add("dtype_unknown", BLOCKER,
                        f"{f.name} stores {name} as {t.dtype}, a number format MLX cannot read.",
                        f"{name}: dtype {t.dtype}")
                bad = True
            tensors[name] = (t.dtype, t.shape)
    return None if bad else tensors


def _tokenizer_files(p: Path, out: _Out) -> None:
    from app.checkpoints.tokenizer_files import has_tokenizer_files, read_tokenizer

    tok = read_tokenizer(p)
    if not has_tokenizer_files(p):
        out.add("no_tokenizer", BLOCKER,
                f"{p} has no tokenizer files, so text cannot be turned into tokens.",
                "no tokenizer.json / tokenizer.model / vocab.json")
    elif remote_code_tokenizer(p):
        out.add("tokenizer_remote_code", BLOCKER,
                f"The tokenizer in {p} needs its own Python code ({remote_code_tokenizer(p)}), "
                "which DraftPair never runs.", "auto_map.AutoTokenizer with no built-in class")
    elif tok is None or tok.source == "none" or tok.problems:
        problems = " ".join(tok.problems) if tok is not None else ""
        out.add("tokenizer_damaged", BLOCKER,
                f"The tokenizer files in {p} are damaged" + (f": {problems}" if problems else "."),
                problems or "no readable vocabulary")


_COUNT_KEY = re.compile(r"^(num_|n_|max_)|(_size|_layers|_heads|_dim|_id|_positions)$")


def _decimal_counts(p: Path, config: dict, out: _Out) -> None:
    """Without loading the tokenizer: the tokenizer library validates config.json's value
    types and refuses a count written as a decimal (``2048.0``)."""
    bad = [f"{k} is {v!r}" for k, v in config.items()
           if _COUNT_KEY.search(k) and isinstance(v, float) and v.is_integer()]
    if bad:
        out.add("config_types", BLOCKER,
                f"In {p / 'config.json'}, {'; '.join(bad[:3])} but must be a whole number.",
                "; ".join(bad))


def _tokenizer_load(p: Path, out: _Out) -> None:
    """Load the tokenizer as the app does (no weights): the tokenizer library also checks the
    value types in config.json."""
    from mlx_lm.utils import load_tokenizer

    from app.checkpoints.load_errors import tokenizer_failure

    try:
        load_tokenizer(p, {"trust_remote_code": False})
    except Exception as exc:  # noqa: BLE001
        out.add("tokenizer_load", BLOCKER, tokenizer_failure(exc, p), technical_detail(exc))


def _classes(p: Path, config: dict, out: _Out):
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


def _quant_config_fallbacks(p: Path, config: dict) -> None:
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


def _build(p: Path, config: dict, model_class, args_class, out: _Out):
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

    zeros = {d: mx.zeros((), dtype=getattr(mx, d)) for d in set(_DTYPES.values())}
    return {name: mx.broadcast_to(zeros[_DTYPES[dt]], shape) for name, (dt, shape) in headers.items()}


def _compare(p: Path, config: dict, model, headers, out: _Out) -> None:
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
