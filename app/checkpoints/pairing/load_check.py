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

import os
import re
import threading
from collections import OrderedDict
from pathlib import Path

from app.checkpoints.config_ranges import config_range_problem, remote_code_tokenizer
from app.checkpoints.pairing.model_shapes import (
    DTYPES,
    build_model,
    compare_weights,
    model_classes,
    quant_config_fallbacks,
)
from app.checkpoints.pairing.report import BLOCKER, Finding
from app.checkpoints.safetensors_header import PICKLE_SUFFIXES, HeaderError, read_header
from app.errors import DraftPairError, technical_detail, user_message
from app.fileio import special_files


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
    model_class, args_class = model_classes(p, config, out)
    if model_class is not None and headers is not None:
        quant_config_fallbacks(p, config)
        model = build_model(p, config, model_class, args_class, out)
        if model is not None:
            compare_weights(p, config, model, headers, out)
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
            if t.dtype not in DTYPES:
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
