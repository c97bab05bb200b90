"""What importing a GGUF will make, decided before any tensor is converted.

Public API:
    prepare(source, precision) -> Prepared     the file(s) opened, the mlx-lm config and tensor
                                               plan checked, the MLX bits and output bytes per
                                               tensor (GGUFImportError: one plain sentence)
    plan_import(source, *, dest_dir, precision=None) -> ImportPlan
    ImportPlan: source_bytes, out_bytes, precision, free_disk_bytes, memory_bytes,
                .describe() (one sentence), .refusal() (one sentence or None)
    precision_reason(precision) -> why this precision on this backend, in words

The copy's size is the sum of what each tensor becomes (4 bytes a weight in float32; packed
bits plus a 16-bit scale and bias per group of 32 in 4-bit), so the figure said before the
import is the size written after it.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.checkpoints.gguf_arch import CONFIG_TENSORS, GGUFArchError, mlx_config, tensor_plan
from app.checkpoints.gguf_header import GGUFHeaderError, is_gguf, read_header, split_files
from app.errors import DraftPairError
from app.units import format_bytes

GROUP_SIZE = 32
# MLX bits for a matrix stored as this GGUF type: never fewer bits than the file had
MLX_BITS = {"Q5_0": 5, "Q5_1": 5, "Q5_K": 5, "Q6_K": 6, "IQ4_NL": 4, "IQ4_XS": 4}
# GGUF block types that are MLX affine groups of 32 as they stand, with their MLX bits
EXACT_BITS = {"Q4_0": 4, "Q4_1": 4, "Q8_0": 8, "Q4_K": 4}
DISK_MARGIN = 1.05  # the copy plus its small files and the filesystem's own slack


class GGUFImportError(DraftPairError):
    pass


def default_precision() -> str:
    """4-bit on Metal (fast there), float32 elsewhere (MLX's fastest on the CPU)."""
    import mlx.core as mx

    try:
        return "4bit" if mx.metal.is_available() else "float32"
    except Exception:  # noqa: BLE001 - no Metal back-end in this build
        return "float32"


def precision_reason(precision: str) -> str:
    if precision == "float32":
        return "float32, MLX's fastest precision on this computer's CPU"
    return "4-bit, fast on this Mac's GPU (never fewer bits than the file had)"


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


def quant_bits(t, mlx_name: str, shape: tuple[int, ...]) -> int:
    """MLX bits (4, 5, 6 or 8) for a matrix MLX can quantize, 0 for tensors kept in 16 bits."""
    if len(shape) not in (2, 3) or shape[-1] % GROUP_SIZE or mlx_name.endswith(".mlp.gate.weight"):
        return 0
    kind = t.tensor_type.name
    if kind in MLX_BITS:
        return MLX_BITS[kind]
    if kind in EXACT_BITS:
        return EXACT_BITS[kind]
    return 4 if kind.startswith(("Q2", "Q3", "Q4", "IQ", "TQ", "MXFP4", "NVFP4")) else 8


def out_bytes(n: int, bits: int, precision: str) -> int:
    if precision == "float32":
        return 4 * n
    if bits:
        return n * bits // 8 + (n // GROUP_SIZE) * 4
    return 2 * n


def main_quant(tensors: dict) -> str:
    kinds = Counter(t.tensor_type.name for t in tensors.values() if len(t.shape) >= 2)
    return kinds.most_common(1)[0][0] if kinds else "F32"


@dataclass
class Prepared:
    files: list[Path]
    meta: dict
    tensors: dict
    arch: str
    config: dict
    plan: Any  # gguf_arch.TensorPlan
    todo: list[str]  # tensor names to convert, in order
    bits: dict[str, int]
    sizes: dict[str, int]  # output bytes per tensor
    precision: str

    @property
    def source_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)

    @property
    def out_bytes(self) -> int:
        return sum(self.sizes.values())


def prepare(source: str | os.PathLike[str], precision: str | None) -> Prepared:
    """Open the file (set) and check it maps onto mlx-lm's model; nothing is converted."""
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
    bits = {n: (quant_bits(tensors[n], plan.to_mlx[n], plan.shapes[plan.to_mlx[n]])
                if precision == "4bit" else 0) for n in todo}  # fmt: skip
    sizes = {n: out_bytes(int(tensors[n].n_elements), bits[n], precision) for n in todo}
    return Prepared(files, meta, tensors, arch, config, plan, todo, bits, sizes, precision)


@dataclass(frozen=True)
class ImportPlan:
    name: str  # the GGUF file
    source_bytes: int
    out_bytes: int  # the MLX copy's weights
    precision: str
    free_disk_bytes: int | None
    memory_bytes: int | None  # what the model may use to run here (0/None: unknown)
    memory_source: str = ""

    def describe(self) -> str:
        """One sentence: how big the copy will be, in which precision, and why."""
        return (f"Importing {self.name} ({format_bytes(self.source_bytes)}) makes a "
                f"{format_bytes(self.out_bytes)} MLX copy in {precision_reason(self.precision)}.")

    def refusal(self) -> str | None:
        """One sentence when the copy would not fit the disk or the memory; None when it does."""
        return refusal(self.out_bytes, self.free_disk_bytes, self.memory_bytes,
                       self.memory_source)

    def to_dict(self) -> dict:
        return {"source_bytes": self.source_bytes, "out_bytes": self.out_bytes,
                "precision": self.precision, "free_disk_bytes": self.free_disk_bytes,
                "memory_bytes": self.memory_bytes, "message": self.describe(),
                "refusal": self.refusal()}


def refusal(out: int, free_disk: int | None, memory: int | None, memory_source: str = "") -> str | None:
    if free_disk is not None and out * DISK_MARGIN > free_disk:
        return (f"The MLX copy would take {format_bytes(out)} but the disk has only "
                f"{format_bytes(free_disk)} free; free some space and import again.")
    if memory and out > memory:
        where = f" ({memory_source})" if memory_source else ""
        return (f"The MLX copy ({format_bytes(out)}) would not fit in the "
                f"{format_bytes(memory)} of memory a model may use here{where}, so it could "
                "not run; choose a smaller or more compressed file.")
    return None


def free_disk(folder: Path) -> int | None:
    """Free bytes where ``folder`` is (or would be created)."""
    p = Path(folder)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return int(shutil.disk_usage(p).free)
    except OSError:
        return None


def plan_of(prep: Prepared, dest_dir: Path) -> ImportPlan:
    from app.checkpoints.memory_estimate import memory_budget

    budget = memory_budget()
    return ImportPlan(prep.files[0].name, prep.source_bytes, prep.out_bytes, prep.precision,
                      free_disk(dest_dir), budget.bytes or None, budget.source)


def plan_import(source: str | os.PathLike[str], *, dest_dir: str | os.PathLike[str],
                precision: str | None = None) -> ImportPlan:
    """What importing ``source`` into ``dest_dir`` makes, and whether it fits (reads headers
    and the tensor table only)."""
    return plan_of(prepare(source, precision), Path(dest_dir))
