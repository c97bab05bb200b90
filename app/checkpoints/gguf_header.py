"""Read a GGUF file's header quickly: metadata scalars and strings, array lengths, split sets.

Public API:
    read_header(path, *, tensors=False) -> GGUFHeader   never loads tensors; arrays skipped;
                                             every count bounded by the file's size
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

import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import DraftPairError
from app.fileio import open_regular

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
        with open_regular(path) as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return False

def shown(text: str) -> str:
    """A name read from the file, fit for a message: printable, short, quoted."""
    clean = "".join(c if c.isprintable() else "?" for c in text[:60])
    return repr(clean + ("…" if len(text) > 60 else "")) if clean else "an unnamed entry"


class _Reader:
    """Reads a header with every count and length bounded by what the file can hold."""

    def __init__(self, fh, name: str):
        self.fh = fh
        self.name = name
        self.size = os.fstat(fh.fileno()).st_size

    def damaged(self, what: str) -> GGUFHeaderError:
        return GGUFHeaderError(f"{self.name} cannot be read as GGUF: its header {what}.")

    def left(self) -> int:
        return self.size - self.fh.tell()

    def fits(self, count: int, each: int, what: str) -> None:
        if count * each > self.left():
            raise self.damaged(f"declares {count:,} {what}, more than its {self.size:,} bytes "
                               "can hold (a damaged or incomplete file)")


    def take(self, fmt: str, width: int):
        data = self.fh.read(width)
        if len(data) != width:
            raise GGUFHeaderError(f"{self.name} cannot be read as GGUF: it ends inside its header "
                                  "(an incomplete download?).")
        return struct.unpack(fmt, data)[0]

    def string(self, keep: bool = True) -> str | None:
        n = self.take("<Q", 8)
        if n > 1 << 28:
            raise self.damaged("holds a text longer than 256 MB")
        self.fits(n, 1, "bytes of text")
        if not keep:
            self.fh.seek(n, 1)
            return None
        return self.fh.read(n).decode("utf-8", errors="replace")

    def value(self, vtype: int):
        if vtype in _SCALARS:
            return self.take(*_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        raise self.damaged(f"has an unknown value type {vtype}")


def _tensor_infos(r: _Reader, head: GGUFHeader) -> None:
    """Checks that every tensor the header lists lies inside the file."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    infos = []
    for _ in range(head.tensor_count):
        name = r.string() or ""
        n_dims = r.take("<I", 4)
        if not 1 <= n_dims <= 8:
            raise r.damaged(f"gives tensor {shown(name)} {n_dims} dimensions")
        dims = [r.take("<Q", 8) for _ in range(n_dims)]
        kind, offset = r.take("<I", 4), r.take("<Q", 8)
        infos.append((shown(name), dims, kind, offset))
    align = head.meta.get("general.alignment", 32)
    if not isinstance(align, int) or align <= 0 or align & (align - 1) or align > 1 << 20:
        raise r.damaged(f"gives an alignment of {align!r}")
    data_start = -(-r.fh.tell() // align) * align
    room = r.size - data_start
    for name, dims, kind, offset in infos:
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        except (ValueError, KeyError):
            raise r.damaged(f"gives tensor {name} an unknown number format ({kind})") from None
        count = 1
        for d in dims:
            count *= d
        if count > 1 << 48 or dims[0] % block:
            raise r.damaged(f"gives tensor {name} an impossible shape {tuple(dims)}")
        nbytes = count // block * type_size
        if offset % align or offset + nbytes > room:
            raise GGUFHeaderError(
                f"{r.name} cannot be read as GGUF: tensor {name} lies past the end of the file "
                f"({offset + nbytes + data_start:,} of {r.size:,} bytes; an incomplete download?).")


def read_header(path: str | Path, *, tensors: bool = False) -> GGUFHeader:
    """The header's metadata (arrays skipped); with ``tensors``, also checks that every tensor
    it lists lies inside the file. GGUFHeaderError (one plain sentence) when it cannot."""
    path = Path(path)
    try:
        with open_regular(path) as fh:
            r = _Reader(fh, path.name)
            if fh.read(4) != MAGIC:
                raise GGUFHeaderError(f"{path.name} is not a GGUF file.")
            version = r.take("<I", 4)
            if version not in (2, 3):
                raise GGUFHeaderError(f"{path.name} is GGUF version {version}; 2 and 3 are read.")
            n_tensors, n_kv = r.take("<Q", 8), r.take("<Q", 8)
            r.fits(n_tensors, 24, "tensors")
            r.fits(n_kv, 13, "settings")
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
                    r.fits(count, 8, f"items in {shown(key)}")
                    for _ in range(count):
                        r.string(keep=False)
                elif itype in _SCALARS:
                    r.fits(count, _SCALARS[itype][1], f"items in {shown(key)}")
                    fh.seek(count * _SCALARS[itype][1], 1)
                else:
                    raise GGUFHeaderError(f"{path.name} has nested arrays in its header.")
            if tensors:
                _tensor_infos(r, head)
            return head
    except OSError as exc:
        from app.errors import user_message

        raise GGUFHeaderError(user_message(exc, file=path)) from None


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
