"""Convert a GGUF file (or split set) into an mlx-lm checkpoint folder, and import it.

Public API:
    convert_gguf(source, out, *, precision=None, progress=None, cancel=None) -> dict
        source: a .gguf file or any part of a ``-0000K-of-0000N.gguf`` set. Writes config.json,
        model.safetensors (sharded with an index above 2 GB), generation_config.json and the
        tokenizer files rebuilt from the metadata into ``out`` (created; must not exist).
        Returns what was converted (architecture, quant types, precision, base_model, ...).
    import_gguf(source, *, store=None, name=None, precision=None, progress=None, cancel=None,
                found_in=None) -> StoreEntry
        converts into the store's models folder and records the source there
        (``draftpair_source.json``); the GGUF itself is read in place, never copied.
    converted_from(folder) -> dict | None          the recorded source of an imported GGUF
    default_precision() -> "float32" (CPU) | "4bit" (Metal)
    ImportProgress(message, done, total); GGUFImportError, ImportCancelled

Every tensor is dequantized with the ``gguf`` package (legacy Q4_0..Q8_0, K-quants, IQ-quants,
F16/BF16/F32) to float32; on the CPU the checkpoint stays float32 (MLX's fastest there), on
Metal the matrices are re-quantized to MLX affine quantization in groups of 32, never with
fewer bits than the file had (4-bit for Q4/Q3/Q2/IQ types, 5 for Q5, 6 for Q6_K, 8 for Q8_0
and float tensors); Q4_0, Q4_1, Q4_K and Q8_0 blocks are carried over as they are (the same
integers, their scales in 16 bits), without a second rounding. Tensors go one at a time, so
memory stays near one output shard.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.checkpoints.gguf_arch import (
    CONFIG_TENSORS,
    GGUFArchError,
    fix_tensor,
    mlx_config,
    tensor_plan,
)
from app.checkpoints.gguf_header import GGUFHeaderError, is_gguf, read_header, split_files
from app.checkpoints.gguf_tokenizer import GGUFTokenizerError, build_tokenizer_files
from app.errors import DraftPairError

if TYPE_CHECKING:
    from app.checkpoints.store import Store, StoreEntry

CONVERTER_VERSION = 1
SOURCE_FILE = "draftpair_source.json"
SHARD_BYTES = 2 << 30
GROUP_SIZE = 32
# MLX bits for a matrix stored as this GGUF type: never fewer bits than the file had
MLX_BITS = {"Q5_0": 5, "Q5_1": 5, "Q5_K": 5, "Q6_K": 6, "IQ4_NL": 4, "IQ4_XS": 4}


class GGUFImportError(DraftPairError):
    pass


class ImportCancelled(GGUFImportError):
    pass


@dataclass(frozen=True)
class ImportProgress:
    message: str
    done: int = 0  # tensors converted
    total: int = 0

    @property
    def fraction(self) -> float | None:
        return self.done / self.total if self.total else None


ProgressFn = Callable[[ImportProgress], None] | None


def default_precision() -> str:
    """4-bit on Metal (fast there), float32 elsewhere (MLX's fastest on the CPU)."""
    import mlx.core as mx

    try:
        return "4bit" if mx.metal.is_available() else "float32"
    except Exception:  # noqa: BLE001 - no Metal back-end in this build
        return "float32"


def _open(files: list[Path]):
    from gguf import GGUFReader

    readers = []
    for f in files:
        try:  # every count and tensor bounded by the file's size before gguf reads it
            read_header(f, tensors=True)
        except GGUFHeaderError as exc:
            raise GGUFImportError(str(exc)) from None
        try:
            readers.append(GGUFReader(f))
        except Exception:  # noqa: BLE001 - a damaged file is one plain line
            raise GGUFImportError(
                f"{f.name} cannot be read as GGUF: it is damaged or incomplete."
            ) from None
    meta = {
        k: fld.contents()
        for k, fld in readers[0].fields.items()
        if not k.startswith("GGUF.") and fld.types
    }
    tensors = {t.name: t for r in readers for t in r.tensors}
    expected = meta.get("split.tensors.count")
    if isinstance(expected, int) and expected != len(tensors):
        raise GGUFImportError(
            f"The GGUF set holds {len(tensors)} tensors but says it has {expected}."
        )
    return meta, tensors


def _dequant(t):
    import numpy as np
    from gguf import quants

    try:
        w = quants.dequantize(t.data, t.tensor_type)
    except NotImplementedError:
        raise GGUFImportError(
            f"Tensor {t.name} uses {t.tensor_type.name}, which the installed gguf package "
            "cannot dequantize."
        ) from None
    return np.ascontiguousarray(w, dtype=np.float32)


def _f16(raw, start: int):
    import numpy as np

    return raw[:, start : start + 2].copy().view(np.float16)[:, 0].astype(np.float32)


def _groups_q4_0(raw):  # d * (q - 8)
    d = _f16(raw, 0)
    return d, -8.0 * d


def _groups_q4_1(raw):  # d * q + m
    return _f16(raw, 0), _f16(raw, 2)


def _groups_q8_0(raw):  # d * q, q signed; MLX holds q + 128
    d = _f16(raw, 0)
    return d, -128.0 * d


def _groups_q4_k(raw):  # 8 sub-blocks of 32: (d * sc) * q - dmin * m
    from gguf.quants import Q4_K

    sc, mins = Q4_K.get_scale_min(raw[:, 4:16].copy())
    d, dmin = _f16(raw, 0)[:, None], _f16(raw, 2)[:, None]
    return (d * sc).reshape(-1), (-dmin * mins).reshape(-1)


# GGUF block types that are MLX affine groups of 32 as they stand:
# type -> (MLX bits, bytes per block, (scale, bias) per group of 32 from the raw blocks)
EXACT = {
    "Q4_0": (4, 18, _groups_q4_0),
    "Q4_1": (4, 20, _groups_q4_1),
    "Q8_0": (8, 34, _groups_q8_0),
    "Q4_K": (4, 144, _groups_q4_k),
}


def _exact_blocks(t, w, fix):
    """(packed uint32, scales, biases) carrying ``t``'s blocks over to MLX without requantizing,
    or None when ``t`` is not a block type MLX can hold as is. ``w`` is the dequantized
    tensor after ``fix`` (the row reordering applied to it is applied to the scales too)."""
    import numpy as np

    spec = EXACT.get(t.tensor_type.name)
    if spec is None:
        return None
    bits, block_bytes, groups_of = spec
    d, m = groups_of(np.asarray(t.data, dtype=np.uint8).reshape(-1, block_bytes))
    shape = (*w.shape[:-1], w.shape[-1] // GROUP_SIZE)
    d, m = fix(d.reshape(shape)), fix(m.reshape(shape))
    groups = w.reshape(*shape, GROUP_SIZE)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d[..., None] != 0, np.rint((groups - m[..., None]) / d[..., None]), 0)
    q = np.clip(q, 0, (1 << bits) - 1).astype(np.uint32).reshape(w.shape)
    per = 32 // bits
    q = q.reshape(*q.shape[:-1], q.shape[-1] // per, per)
    packed = np.zeros(q.shape[:-1], dtype=np.uint32)
    for j in range(per):
        packed |= q[..., j] << np.uint32(bits * j)
    return packed, d, m


def _quant_bits(t, mlx_name: str, shape: tuple[int, ...]) -> int:
    """MLX bits (4, 5, 6 or 8) for a matrix MLX can quantize, 0 for tensors kept in 16 bits."""
    if len(shape) not in (2, 3) or shape[-1] % GROUP_SIZE or mlx_name.endswith(".mlp.gate.weight"):
        return 0
    kind = t.tensor_type.name
    if kind in MLX_BITS:
        return MLX_BITS[kind]
    if kind in EXACT:
        return EXACT[kind][0]
    return 4 if kind.startswith(("Q2", "Q3", "Q4", "IQ", "TQ", "MXFP4", "NVFP4")) else 8


def _out_bytes(n: int, bits: int, precision: str) -> int:
    if precision == "float32":
        return 4 * n
    if bits:
        return n * bits // 8 + (n // GROUP_SIZE) * 4
    return 2 * n


def _main_quant(tensors: dict) -> str:
    kinds = Counter(t.tensor_type.name for t in tensors.values() if len(t.shape) >= 2)
    return kinds.most_common(1)[0][0] if kinds else "F32"


def convert_gguf(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    precision: str | None = None,
    progress: ProgressFn = None,
    cancel: threading.Event | None = None,
) -> dict:
    import mlx.core as mx

    say = progress or (lambda _p: None)
    out = Path(out)
    precision = precision or default_precision()
    if precision not in ("float32", "4bit"):
        raise GGUFImportError(f"Unknown precision {precision!r} (float32 or 4bit).")
    source = Path(source).expanduser()
    if not source.is_file() or not is_gguf(source):
        raise GGUFImportError(f"{source} is not a GGUF file.")
    try:
        files = split_files(source)
    except GGUFHeaderError as exc:
        raise GGUFImportError(str(exc)) from None
    if out.exists():
        raise GGUFImportError(f"{out} already exists; remove it or choose another name.")

    say(
        ImportProgress(
            f"Reading {files[0].name}" + (f" (+{len(files) - 1} parts)" if len(files) > 1 else "")
        )
    )
    meta, tensors = _open(files)
    arch = str(meta.get("general.architecture") or "")
    lazy = {n: (lambda t=t: _dequant(t)) for n, t in tensors.items()}
    try:
        config = mlx_config(meta, set(tensors), lazy)
        plan = tensor_plan(arch, config)
    except GGUFArchError as exc:
        raise GGUFImportError(str(exc)) from None
    except KeyError as exc:
        raise GGUFImportError(
            f"The file's {arch or 'model'} settings are incomplete: {exc.args[0] if exc.args else '?'}"
            " is missing.") from None
    except (TypeError, ValueError, IndexError, ArithmeticError, AttributeError):
        raise GGUFImportError(
            f"The file's {arch or 'model'} settings are damaged: a value is missing, out of range "
            "or of the wrong kind.") from None

    skipped = [n for n in tensors if CONFIG_TENSORS.match(n)]
    if arch.startswith("gemma"):
        skipped += [n for n in tensors if n == "output.weight"]
    todo = [n for n in tensors if n not in skipped]
    unknown = [n for n in todo if n not in plan.to_mlx]
    if unknown:
        raise GGUFImportError(
            f"{len(unknown)} tensor(s) have no place in mlx-lm's {config['model_type']} model "
            f"(first: {unknown[0]}); the file may be a variant DraftPair does not know."
        )
    produced = {plan.to_mlx[n] for n in todo}
    missing = [m for m in plan.shapes if m not in produced and m not in plan.optional]
    if missing:
        raise GGUFImportError(
            f"The file lacks {len(missing)} weight(s) the {config['model_type']} model needs "
            f"(first: {missing[0]})."
        )
    for n in todo:
        want = plan.shapes[plan.to_mlx[n]]
        have = tuple(int(x) for x in reversed(tensors[n].shape.tolist()))
        if have != want:
            raise GGUFImportError(f"Tensor {n} has shape {have}, but the model needs {want}.")

    bits = {n: (_quant_bits(tensors[n], plan.to_mlx[n], plan.shapes[plan.to_mlx[n]])
                if precision == "4bit" else 0) for n in todo}  # fmt: skip
    sizes = {n: _out_bytes(int(tensors[n].n_elements), bits[n], precision) for n in todo}
    shards: list[list[str]] = [[]]
    acc = 0
    for n in todo:
        if shards[-1] and acc + sizes[n] > SHARD_BYTES:
            shards.append([])
            acc = 0
        shards[-1].append(n)
        acc += sizes[n]
    half = mx.bfloat16 if arch.startswith("gemma") else mx.float16

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        done = 0
        msg = f"Converting {len(todo)} tensors to {precision}"
        say(ImportProgress(msg, 0, len(todo)))
        weight_map: dict[str, str] = {}
        for i, names in enumerate(shards):
            fname = (
                "model.safetensors"
                if len(shards) == 1
                else f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            )
            arrays: dict[str, mx.array] = {}
            for n in names:
                if cancel is not None and cancel.is_set():
                    raise ImportCancelled("The import was cancelled; nothing was kept.")
                mlx_name = plan.to_mlx[n]

                def fix(a, n=n):
                    return fix_tensor(arch, n, a, config)

                w_np = fix(_dequant(tensors[n]))
                w = mx.array(w_np)
                base = mlx_name.rsplit(".", 1)[0]
                exact = _exact_blocks(tensors[n], w_np, fix) if bits[n] else None
                if exact is not None:  # same numbers as the file: no second rounding
                    q, scales, biases = (mx.array(x) for x in exact)
                    parts = {mlx_name: q, f"{base}.scales": scales.astype(half),
                             f"{base}.biases": biases.astype(half)}  # fmt: skip
                elif bits[n]:
                    q, scales, biases = mx.quantize(w, group_size=GROUP_SIZE, bits=bits[n])
                    parts = {mlx_name: q, f"{base}.scales": scales.astype(half),
                             f"{base}.biases": biases.astype(half)}  # fmt: skip
                else:
                    parts = {mlx_name: w if precision == "float32" else w.astype(half)}
                mx.eval(*parts.values())
                arrays.update(parts)
                weight_map.update(dict.fromkeys(parts, fname))
                done += 1
                say(ImportProgress(msg, done, len(todo)))
            mx.save_safetensors(str(tmp / fname), arrays, metadata={"format": "mlx"})
            del arrays
        if len(shards) > 1:
            index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
            (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")

        config["torch_dtype"] = (
            "float32"
            if precision == "float32"
            else ("bfloat16" if half == mx.bfloat16 else "float16")
        )
        if precision == "4bit":
            q: dict = {"group_size": GROUP_SIZE, "bits": 4, "mode": "affine"}
            for n, b in bits.items():
                if b and b != 4:  # per-layer override, as mlx-lm's mixed quantization writes it
                    q[plan.to_mlx[n].rsplit(".", 1)[0]] = {"group_size": GROUP_SIZE, "bits": b}
            config["quantization"] = q
            config["quantization_config"] = q
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        gen = {k: config[k] for k in ("bos_token_id", "eos_token_id") if k in config}
        (tmp / "generation_config.json").write_text(json.dumps(gen) + "\n")
        say(ImportProgress("Rebuilding the tokenizer from the file's metadata", done, len(todo)))
        try:
            has_template = build_tokenizer_files(
                meta, tmp, context_length=config.get("max_position_embeddings")
            )
        except GGUFTokenizerError as exc:
            raise GGUFImportError(str(exc)) from None
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {
        "format": "gguf",
        "source_files": [str(f) for f in files],
        "source_bytes": sum(f.stat().st_size for f in files),
        "gguf_name": meta.get("general.name"),
        "gguf_architecture": arch,
        "gguf_quantization": _main_quant(tensors),
        "gguf_tensor_types": dict(Counter(t.tensor_type.name for t in tensors.values())),
        "model_type": config["model_type"],
        "precision": precision,
        "base_model": not has_template,
        "converter_version": CONVERTER_VERSION,
    }


def converted_from(folder: str | os.PathLike[str]) -> dict | None:
    try:
        data = json.loads((Path(folder) / SOURCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def default_name(source: Path) -> str:
    from app.checkpoints.gguf_header import SPLIT_RE

    m = SPLIT_RE.match(source.name)
    stem = m["stem"] if m else source.stem
    return stem.replace(" ", "-")


def import_gguf(
    source: str | os.PathLike[str],
    *,
    store: Store | None = None,
    name: str | None = None,
    precision: str | None = None,
    progress: ProgressFn = None,
    cancel: threading.Event | None = None,
    found_in: str | None = None,
) -> StoreEntry:
    from app.checkpoints.inspect import inspect_checkpoint
    from app.checkpoints.store import SOURCE_MODELS, Store, StoreEntry, dir_size

    store = store or Store()
    src = Path(source).expanduser().resolve()
    try:
        first = split_files(src)[0] if src.is_file() else src
    except GGUFHeaderError as exc:
        raise GGUFImportError(str(exc)) from None
    for entry in store.list():
        rec = converted_from(entry.path)
        if rec and rec.get("source_files", [None])[0] == str(first):
            raise GGUFImportError(f"{first.name} is already imported as {entry.name}.")
    name = name or default_name(first)
    if store.get(name) is not None or (store.models_dir / name).exists():
        raise GGUFImportError(f"A model named {name!r} already exists; choose another name.")
    dest = store.models_dir / name
    info = convert_gguf(first, dest, precision=precision, progress=progress, cancel=cancel)
    if found_in:
        info["found_in"] = found_in
    (dest / SOURCE_FILE).write_text(json.dumps(info, indent=2) + "\n")
    ck = inspect_checkpoint(dest, read_tokenizer_files=False)
    return StoreEntry(name, dest, SOURCE_MODELS, dir_size(dest), ck)
