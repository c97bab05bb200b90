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
        (``draftpair_source.json``); the GGUF itself is read in place, never copied. Its first
        progress message says how big the copy will be and in which precision
        (``gguf_plan.ImportPlan.describe``); a copy that would not fit the disk or the memory
        is refused in one sentence before anything is written.
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
from typing import TYPE_CHECKING, Any

from app.checkpoints.gguf_arch import fix_tensor
from app.checkpoints.gguf_header import GGUFHeaderError, split_files
from app.checkpoints.gguf_plan import (  # noqa: F401 - re-exported: the import's public names
    GROUP_SIZE,
    GGUFImportError,
    ImportPlan,
    Prepared,
    _dequant,
    default_precision,
    main_quant,
    plan_of,
    prepare,
)
from app.checkpoints.gguf_tokenizer import GGUFTokenizerError, build_tokenizer_files

if TYPE_CHECKING:
    from app.checkpoints.store import Store, StoreEntry

CONVERTER_VERSION = 1
SOURCE_FILE = "draftpair_source.json"
SHARD_BYTES = 2 << 30


class ImportCancelled(GGUFImportError):
    pass


@dataclass(frozen=True)
class ImportProgress:
    message: str
    done: int = 0  # tensors converted
    total: int = 0
    plan: bool = False  # the message says what the copy will be (size, precision)

    @property
    def fraction(self) -> float | None:
        return self.done / self.total if self.total else None


ProgressFn = Callable[[ImportProgress], None] | None


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


def convert_gguf(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    precision: str | None = None,
    progress: ProgressFn = None,
    cancel: threading.Event | None = None,
    prepared: Prepared | None = None,
) -> dict:
    import mlx.core as mx

    say = progress or (lambda _p: None)
    out = Path(out)
    prep = prepared if prepared is not None else prepare(source, precision)
    if out.exists():
        raise GGUFImportError(f"{out} already exists; remove it or choose another name.")
    files, meta, tensors, arch = prep.files, prep.meta, prep.tensors, prep.arch
    config, plan, todo, bits, sizes = prep.config, prep.plan, prep.todo, prep.bits, prep.sizes
    precision = prep.precision
    say(
        ImportProgress(
            f"Reading {files[0].name}" + (f" (+{len(files) - 1} parts)" if len(files) > 1 else "")
        )
    )
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
            quant: dict[str, Any] = {"group_size": GROUP_SIZE, "bits": 4, "mode": "affine"}
            for n, b in bits.items():
                if b and b != 4:  # per-layer override, as mlx-lm's mixed quantization writes it
                    quant[plan.to_mlx[n].rsplit(".", 1)[0]] = {"group_size": GROUP_SIZE, "bits": b}
            config["quantization"] = quant
            config["quantization_config"] = quant
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
        "gguf_quantization": main_quant(tensors),
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
    from app.checkpoints.store import SOURCE_MODELS, Store, StoreEntry, check_model_name, dir_size

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
    name = check_model_name(name) if name is not None else default_name(first)
    if store.get(name) is not None or (store.models_dir / name).exists():
        raise GGUFImportError(f"A model named {name!r} already exists; choose another name.")
    dest = store.models_dir / name
    prep = prepare(first, precision)
    plan = plan_of(prep, store.models_dir)
    refused = plan.refusal()
    if refused:
        raise GGUFImportError(refused)
    if progress is not None:  # said before any tensor is converted
        progress(ImportProgress(plan.describe(), plan=True))
    info = convert_gguf(first, dest, progress=progress, cancel=cancel, prepared=prep)
    info["out_bytes"] = plan.out_bytes
    if found_in:
        info["found_in"] = found_in
    (dest / SOURCE_FILE).write_text(json.dumps(info, indent=2) + "\n")
    ck = inspect_checkpoint(dest, read_tokenizer_files=False)
    return StoreEntry(name, dest, SOURCE_MODELS, dir_size(dest), ck)
