"""Read a GGUF file's header quickly: metadata scalars and strings, array lengths, split sets.

Public API:
    read_header(path) -> GGUFHeader          never loads tensors; token arrays are skipped
    split_files(path) -> list[Path]          every file of a ``-00001-of-0000N.gguf`` set, in
                                             order (a single file: [path]); GGUFHeaderError
                                             when a part is missing
    is_gguf(path) -> bool                    by the magic bytes
    GGUFHeader: path, version, tensor_count, meta (dict), array_lengths (dict)
                + architecture, name, has_chat_template, context_length, split_count

Listing a model library must be quick: gguf's GGUFReader parses every token of a 150k-word
vocabulary, which takes seconds per file; this reader seeks over arrays instead.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import DraftPairError

MAGIC = b"GGUF"
SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
# GGUF value types: (struct format, width)
_SCALARS = {
    0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
    6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8),
}  # fmt: skip
_STRING, _ARRAY = 8, 9


class GGUFHeaderError(DraftPairError):
    pass


@dataclass
class GGUFHeader:
    path: Path
    version: int
    tensor_count: int
    meta: dict = field(default_factory=dict)
    array_lengths: dict = field(default_factory=dict)

    @property
    def architecture(self) -> str | None:
        v = self.meta.get("general.architecture")
        return str(v) if v else None

    @property
    def name(self) -> str | None:
        v = self.meta.get("general.name")
        return str(v) if v else None

    @property
    def has_chat_template(self) -> bool:
        return bool(str(self.meta.get("tokenizer.chat_template") or "").strip())

    @property
    def context_length(self) -> int | None:
        v = self.meta.get(f"{self.architecture}.context_length")
        return int(v) if isinstance(v, int) else None

    @property
    def split_count(self) -> int:
        v = self.meta.get("split.count")
        return int(v) if isinstance(v, int) and v > 0 else 1


def is_gguf(path: str | Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return False


class _Reader:
    def __init__(self, fh):
        self.fh = fh

    def take(self, fmt: str, width: int):
        data = self.fh.read(width)
        if len(data) != width:
            raise GGUFHeaderError("The file ends inside its header (truncated download?).")
        return struct.unpack(fmt, data)[0]

    def string(self, keep: bool = True) -> str | None:
        n = self.take("<Q", 8)
        if n > 1 << 28:
            raise GGUFHeaderError("The file's header is damaged (a string longer than 256 MB).")
        if not keep:
            self.fh.seek(n, 1)
            return None
        data = self.fh.read(n)
        if len(data) != n:
            raise GGUFHeaderError("The file ends inside its header (truncated download?).")
        return data.decode("utf-8", errors="replace")

    def value(self, vtype: int):
        if vtype in _SCALARS:
            return self.take(*_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        raise GGUFHeaderError(f"The file's header has an unknown value type {vtype}.")


def read_header(path: str | Path) -> GGUFHeader:
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            r = _Reader(fh)
            if fh.read(4) != MAGIC:
                raise GGUFHeaderError(f"{path.name} is not a GGUF file.")
            version = r.take("<I", 4)
            if version not in (2, 3):
                raise GGUFHeaderError(f"{path.name} is GGUF version {version}; 2 and 3 are read.")
            n_tensors, n_kv = r.take("<Q", 8), r.take("<Q", 8)
            head = GGUFHeader(path=path, version=version, tensor_count=n_tensors)
            for _ in range(n_kv):
                key = r.string() or ""
                vtype = r.take("<I", 4)
                if vtype != _ARRAY:
                    head.meta[key] = r.value(vtype)
                    continue
                itype, count = r.take("<I", 4), r.take("<Q", 8)
                head.array_lengths[key] = count
                if itype == _STRING:
                    for _ in range(count):
                        r.string(keep=False)
                elif itype in _SCALARS:
                    fh.seek(count * _SCALARS[itype][1], 1)
                else:
                    raise GGUFHeaderError(f"{path.name} has nested arrays in its header.")
            return head
    except OSError as exc:
        raise GGUFHeaderError(f"{path} cannot be read ({type(exc).__name__}).") from None


def split_files(path: str | Path) -> list[Path]:
    """All parts of the split set ``path`` belongs to (any part may be given), in order."""
    path = Path(path)
    m = SPLIT_RE.match(path.name)
    if not m:
        return [path]
    count = int(m["count"])
    parts = [
        path.with_name(f"{m['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)
    ]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise GGUFHeaderError(
            f"This is part of a {count}-file GGUF set and {len(missing)} part(s) are missing "
            f"({', '.join(missing[:3])})."
        )
    return parts
