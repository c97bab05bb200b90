"""Read safetensors headers without loading weights.

Public API:
    read_header(path) -> SafetensorsHeader          one file; raises HeaderError
    parse_header(raw, name, size=None) -> SafetensorsHeader   the JSON header bytes alone
        (as fetched with an HTTP range request); ``size`` checks it against the file size
    summarize_weights(folder, config=None) -> WeightsSummary   all shards of a checkpoint

A safetensors file is an 8-byte little-endian header length, a JSON header, then raw tensor
data. Only the header bytes are read, so this is safe and fast on files of any size; a
truncated or corrupt file gives a HeaderError with a plain message, never a traceback.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from app.fileio import JSON_LIMIT, open_regular, read_regular_text

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own limit


class HeaderError(ValueError):
    """A safetensors file whose header cannot be read; the message says why, plainly."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    start: int = 0  # offset of the data from the end of the header

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    data_bytes: int
    data_start: int = 0  # file offset of the first data byte (8 + header length)


def _count(value: object) -> bool:
    """A dimension or byte offset: a whole number from 0 (JSON true/1.5/"3" are not)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62


def read_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """Parse one safetensors header; check it against the file size."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open_regular(path) as f:
            head = f.read(8)
            if len(head) < 8:
                raise HeaderError(f"{path.name} is too short to be a safetensors file.")
            (n,) = struct.unpack("<Q", head)
            if n == 0 or n > MAX_HEADER_BYTES or 8 + n > size:
                raise HeaderError(
                    f"{path.name} is truncated or not a safetensors file "
                    f"(header says {n} bytes, file has {size})."
                )
            raw = f.read(n)
    except OSError as exc:
        raise HeaderError(f"{path.name} cannot be read ({exc.strerror or exc}).") from None
    return parse_header(raw, path.name, size, path=path)


def parse_header(raw: bytes, name: str, size: int | None = None, *,
                 path: Path | None = None) -> SafetensorsHeader:
    """The tensors a safetensors JSON header describes (``raw``: the bytes after the 8-byte
    length). With ``size`` (the whole file's), a header describing more data is an error."""
    path = path if path is not None else Path(name)
    n = len(raw)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise HeaderError(f"{name} has a corrupt header (not valid JSON).") from None
    if not isinstance(data, dict):
        raise HeaderError(f"{name} has a corrupt header (not a JSON object).")
    metadata = data.pop("__metadata__", None) or {}
    tensors: dict[str, TensorInfo] = {}
    end_max = 0
    for tname, spec in data.items():
        shape_raw = spec.get("shape") if isinstance(spec, dict) else None
        offsets = spec.get("data_offsets") if isinstance(spec, dict) else None
        if (
            not isinstance(spec, dict)
            or not isinstance(spec.get("dtype"), str)
            or not isinstance(shape_raw, list)
            or not all(_count(d) for d in shape_raw)
            or not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(_count(v) for v in offsets)
        ):
            raise HeaderError(f"{name} has a corrupt entry for tensor {tname!r}.")
        dtype = spec["dtype"]
        shape = tuple(shape_raw)
        start, end = offsets
        if start < 0 or end < start:
            raise HeaderError(f"{name} has invalid offsets for tensor {tname!r}.")
        tensors[tname] = TensorInfo(tname, dtype, shape, end - start, start)
        end_max = max(end_max, end)
    if size is not None and 8 + n + end_max > size:
        raise HeaderError(
            f"{name} is truncated: its header describes {8 + n + end_max} bytes "
            f"but the file has {size} (an interrupted download?)."
        )
    return SafetensorsHeader(
        path=path,
        tensors=tensors,
        metadata=metadata if isinstance(metadata, dict) else {},
        data_bytes=end_max,
        data_start=8 + n,
    )


@dataclass(frozen=True)
class WeightsSummary:
    files: tuple[Path, ...]
    tensors: dict[str, TensorInfo]
    weight_bytes: int
    param_count: int
    dtypes: dict[str, int]  # dtype -> bytes
    errors: tuple[str, ...] = ()  # plain messages for unreadable/missing shards
    pickle_files: tuple[Path, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return bool(self.files) and not self.errors

    def main_dtype(self) -> str | None:
        if not self.dtypes:
            return None
        return max(self.dtypes.items(), key=lambda kv: kv[1])[0]


PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


def _quant_bits(config: dict | None, module: str) -> int | None:
    if not config:
        return None
    q = config.get("quantization") or config.get("quantization_config")
    if not isinstance(q, dict):
        return None
    per_layer = q.get(module)
    bits = per_layer.get("bits") if isinstance(per_layer, dict) else q.get("bits")
    ok = isinstance(bits, int) and not isinstance(bits, bool) and 1 <= bits <= 16
    return bits if ok else None


def summarize_weights(folder: str | os.PathLike[str], config: dict | None = None) -> WeightsSummary:
    """Headers of every ``*.safetensors`` in ``folder`` (and shards named by the index)."""
    folder = Path(folder)
    errors: list[str] = []
    files = sorted(p for p in folder.glob("*.safetensors") if p.is_file())
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(read_regular_text(index, limit=JSON_LIMIT)).get("weight_map", {})
            shards = {v for v in weight_map.values() if isinstance(v, str)}
            if len(shards) != len(set(map(str, weight_map.values()))):
                errors.append("model.safetensors.index.json names shards that are not file names.")
            for shard in sorted(shards):
                if not (folder / shard).is_file():
                    errors.append(f"Shard {shard} listed in the index is missing.")
        except (OSError, ValueError, AttributeError, TypeError):
            errors.append("model.safetensors.index.json is not valid JSON.")
    pickles = (
        tuple(sorted(p for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES and p.is_file()))
        if folder.is_dir()
        else ()
    )
    tensors: dict[str, TensorInfo] = {}
    for f in files:
        try:
            tensors.update(read_header(f).tensors)
        except HeaderError as exc:
            errors.append(str(exc))
    weight_bytes = sum(t.nbytes for t in tensors.values())
    dtypes: dict[str, int] = {}
    for t in tensors.values():
        dtypes[t.dtype] = dtypes.get(t.dtype, 0) + t.nbytes
    params = 0
    for name, t in tensors.items():
        if name.endswith((".scales", ".biases")):
            base = name.rsplit(".", 1)[0]
            if base + ".weight" in tensors and tensors[base + ".weight"].dtype == "U32":
                continue  # quantization metadata, not parameters
        if t.dtype == "U32" and name.endswith(".weight"):
            base = name[: -len(".weight")]
            if base + ".scales" in tensors:
                bits = _quant_bits(config, base) or _infer_bits(
                    t, tensors[base + ".scales"], config
                )
                params += t.numel * 32 // max(bits, 1)
                continue
        params += t.numel
    return WeightsSummary(
        files=tuple(files),
        tensors=tensors,
        weight_bytes=weight_bytes,
        param_count=params,
        dtypes=dtypes,
        errors=tuple(errors),
        pickle_files=pickles,
    )


def _infer_bits(weight: TensorInfo, scales: TensorInfo, config: dict | None) -> int:
    group = 64
    q = (config or {}).get("quantization") or {}
    if isinstance(q, dict) and isinstance(q.get("group_size"), int) and q["group_size"] > 0:
        group = q["group_size"]
    if weight.shape and scales.shape:
        in_features = scales.shape[-1] * group
        if in_features:
            bits = weight.shape[-1] * 32 // in_features
            if bits in (2, 3, 4, 5, 6, 8):
                return bits
    return 4


_LAYER_RE = re.compile(r"^(?:model\.)?layers\.(\d+)\.")


def layer_index(name: str) -> int | None:
    m = _LAYER_RE.match(name)
    return int(m.group(1)) if m else None
