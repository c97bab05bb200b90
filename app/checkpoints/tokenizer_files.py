"""Read a checkpoint's tokenizer files as data (no tokenizer library, no remote code).

Public API:
    read_tokenizer(folder) -> TokenizerInfo | None     None when the folder has no tokenizer files
    TokenizerInfo: id_to_token, vocab_type, special tokens, add_bos/add_eos, eos ids,
                   normalizer/pre-tokenizer (as JSON), chat template, problems found.

Used by the pairing check to compare two tokenizers on the token text <-> id mapping itself.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.fileio import JSON_LIMIT, read_regular_bytes, read_regular_text

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "tokenizer.model",
    "tekken.json",
)


@dataclass
class TokenizerInfo:
    folder: Path
    source: str  # tokenizer.json | vocab.json | tokenizer.model | none
    vocab_type: str | None  # BPE, WordPiece, Unigram, WordLevel, SentencePiece, ...
    id_to_token: dict[int, str] = field(default_factory=dict)
    special_ids: set[int] = field(default_factory=set)
    added: dict[int, str] = field(default_factory=dict)
    bos_token: str | None = None
    eos_token: str | None = None
    pad_token: str | None = None
    add_bos: bool | None = None
    add_eos: bool | None = None
    eos_ids: set[int] = field(default_factory=set)
    normalizer: Any = None
    pre_tokenizer: Any = None
    decoder: Any = None
    chat_template: str | None = None
    file_digest: str | None = None  # for formats we cannot read token by token
    problems: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return (max(self.id_to_token) + 1) if self.id_to_token else 0

    def token_id(self, text: str | None) -> int | None:
        if text is None:
            return None
        for i, t in self.added.items():
            if t == text:
                return i
        for i, t in self.id_to_token.items():
            if t == text:
                return i
        return None

    @property
    def mapping_known(self) -> bool:
        return bool(self.id_to_token)


def _json_problem(path: Path, exc: BaseException) -> str:
    """One plain sentence for a tokenizer file that cannot be parsed."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{path.name} is not valid JSON (line {exc.lineno}, column {exc.colno})."
    if isinstance(exc, UnicodeDecodeError):
        return f"{path.name} is not text (it holds binary data)."
    from app.errors import user_message

    return f"{path.name} cannot be read: {user_message(exc)}"


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def _load_json(path: Path, problems: list[str]) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(read_regular_text(path, limit=JSON_LIMIT))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.append(_json_problem(path, exc))
        return None
    except RecursionError:
        problems.append(f"{path.name} nests too deeply to be read.")
        return None


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def read_chat_template(folder: Path, tok_config: dict | None) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        try:
            return read_regular_text(jinja, limit=JSON_LIMIT)
        except (OSError, UnicodeDecodeError):
            return None
    ct_json = folder / "chat_template.json"
    if ct_json.is_file():
        try:
            data = json.loads(read_regular_text(ct_json, limit=JSON_LIMIT))
            if isinstance(data, dict) and isinstance(data.get("chat_template"), str):
                return data["chat_template"]
        except (OSError, ValueError):
            return None
    template = (tok_config or {}).get("chat_template")
    if isinstance(template, list):  # named templates: keep the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) else None


def has_tokenizer_files(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


# Parsed tokenizer.json files by content hash: a draft and target of one family usually ship
# the same multi-MB file, and parsing it once keeps the pairing check well under a second.
_PARSED: OrderedDict[str, Any] = OrderedDict()
_PARSED_MAX = 4
_PARSED_LOCK = threading.Lock()


def _load_tokenizer_json(path: Path, problems: list[str]) -> Any:
    if not path.is_file():
        return None
    try:
        raw = read_regular_bytes(path, limit=JSON_LIMIT)
    except OSError as exc:
        problems.append(_json_problem(path, exc))
        return None
    key = hashlib.sha1(raw).hexdigest()
    with _PARSED_LOCK:
        if key in _PARSED:
            _PARSED.move_to_end(key)
            return _PARSED[key]
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.append(_json_problem(path, exc))
        return None
    except RecursionError:
        problems.append(f"{path.name} nests too deeply to be read.")
        return None
    with _PARSED_LOCK:
        _PARSED[key] = data
        while len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)
    return data


def read_tokenizer(folder: str | Path) -> TokenizerInfo | None:
    folder = Path(folder)
    if not has_tokenizer_files(folder):
        return None
    problems: list[str] = []
    tok_json = _load_tokenizer_json(folder / "tokenizer.json", problems)
    tok_cfg = _load_json(folder / "tokenizer_config.json", problems)
    if not isinstance(tok_cfg, dict):
        tok_cfg = {}
    special_map = _load_json(folder / "special_tokens_map.json", problems)
    if not isinstance(special_map, dict):
        special_map = {}
    info = TokenizerInfo(folder=folder, source="none", vocab_type=None, problems=problems)

    if isinstance(tok_json, dict) and isinstance(tok_json.get("model"), dict):
        info.source = "tokenizer.json"
        model = tok_json["model"]
        info.vocab_type = str(model.get("type") or ("BPE" if "merges" in model else "unknown"))
        vocab = model.get("vocab")
        if isinstance(vocab, dict):
            ids = vocab.values()
            if all(type(i) is int for i in ids) and (not ids or 0 <= min(ids) <= max(ids) < 2**31):
                info.id_to_token = {i: t for t, i in vocab.items()}  # the fast, usual case
            else:
                info.id_to_token = {i: t for t, i in vocab.items() if _is_id(i)}
                problems.append("tokenizer.json has vocabulary entries without a valid id.")
        elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            info.id_to_token = {
                i: str(p[0] if isinstance(p, list) and p else p) for i, p in enumerate(vocab)
            }
        added = tok_json.get("added_tokens")
        for tok in added if isinstance(added, list) else []:
            if isinstance(tok, dict) and _is_id(tok.get("id")):
                info.id_to_token[tok["id"]] = str(tok.get("content"))
                info.added[tok["id"]] = str(tok.get("content"))
                if tok.get("special"):
                    info.special_ids.add(tok["id"])
        info.normalizer = tok_json.get("normalizer")
        info.pre_tokenizer = tok_json.get("pre_tokenizer")
        info.decoder = tok_json.get("decoder")
        post = tok_json.get("post_processor")
        if isinstance(post, dict):
            info.add_bos, info.add_eos = _post_processor_flags(post)
    elif (folder / "vocab.json").is_file():
        vocab = _load_json(folder / "vocab.json", problems)
        if isinstance(vocab, dict):
            info.source = "vocab.json"
            info.vocab_type = "BPE"
            info.id_to_token = {int(i): str(t) for t, i in vocab.items() if _is_id(i)}
    elif (folder / "tokenizer.model").is_file() or (folder / "tekken.json").is_file():
        name = "tokenizer.model" if (folder / "tokenizer.model").is_file() else "tekken.json"
        info.source = name
        info.vocab_type = "SentencePiece" if name == "tokenizer.model" else "Tekken"
        try:
            raw = read_regular_bytes(folder / name, limit=JSON_LIMIT)
            info.file_digest = hashlib.sha256(raw).hexdigest()
            if name == "tokenizer.model":
                pieces, normalizer = _sentencepiece_pieces(raw)
                info.id_to_token = dict(enumerate(pieces))
                info.normalizer = normalizer
        except OSError:
            problems.append(f"{name} cannot be read.")
        except ValueError:
            problems.append(f"{name} is damaged (not a SentencePiece model).")
    elif isinstance(tok_json, dict):
        problems.append("tokenizer.json has no model section.")

    decoder_map = tok_cfg.get("added_tokens_decoder")
    if isinstance(decoder_map, dict):
        for key, tok in decoder_map.items():
            try:
                idx = int(key)
            except ValueError:
                continue
            text = _token_text(tok)
            if text is None:
                continue
            if idx not in info.added:
                info.added[idx] = text
                if info.id_to_token:  # never build a partial table from added tokens alone
                    info.id_to_token.setdefault(idx, text)
            if isinstance(tok, dict) and tok.get("special"):
                info.special_ids.add(idx)

    for attr in ("bos_token", "eos_token", "pad_token"):
        text = _token_text(tok_cfg.get(attr)) or _token_text(special_map.get(attr))
        setattr(info, attr, text)
    if isinstance(tok_cfg.get("add_bos_token"), bool):
        info.add_bos = tok_cfg["add_bos_token"]
    if isinstance(tok_cfg.get("add_eos_token"), bool):
        info.add_eos = tok_cfg["add_eos_token"]
    if info.add_bos is None:
        info.add_bos = False
    if info.add_eos is None:
        info.add_eos = False
    eos_id = info.token_id(info.eos_token)
    if eos_id is not None:
        info.eos_ids.add(eos_id)
    for name in ("config.json", "generation_config.json"):
        data = _load_json(folder / name, []) if (folder / name).is_file() else None
        if isinstance(data, dict):
            value = data.get("eos_token_id")
            if isinstance(value, int):
                info.eos_ids.add(value)
            elif isinstance(value, list):
                info.eos_ids.update(v for v in value if isinstance(v, int))
    info.chat_template = read_chat_template(folder, tok_cfg)
    return info


def _post_processor_flags(post: dict) -> tuple[bool | None, bool | None]:
    """Whether the post-processor adds a special token before/after a single sequence."""
    kind = post.get("type")
    if kind == "Sequence":
        add_bos = add_eos = None
        for p in post.get("processors") or []:
            if isinstance(p, dict):
                b, e = _post_processor_flags(p)
                add_bos = add_bos or b
                add_eos = add_eos or e
        return add_bos, add_eos
    if kind == "TemplateProcessing":
        single = post.get("single") or []
        pieces = [
            "special" if "SpecialToken" in p else "seq" for p in single if isinstance(p, dict)
        ]
        if "seq" in pieces:
            i = pieces.index("seq")
            return ("special" in pieces[:i]), ("special" in pieces[i + 1 :])
    if kind in ("BertProcessing", "RobertaProcessing"):
        return True, True
    return None, None


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("bad varint")


def _fields(buf: bytes):
    """(field number, wire type, value) of one protobuf message; value is bytes or int."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field_no, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if pos + n > len(buf):
                raise ValueError("truncated field")
            value, pos = buf[pos : pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type")
        yield field_no, wire, value


def _sentencepiece_pieces(raw: bytes) -> tuple[list[str], str | None]:
    """Piece texts (index = id) and the normalizer spec of a SentencePiece ModelProto."""
    pieces: list[str] = []
    normalizer = None
    for field_no, wire, value in _fields(raw):
        if field_no == 1 and wire == 2:  # repeated SentencePiece { string piece = 1; ... }
            text = ""
            for f2, w2, v2 in _fields(value):
                if f2 == 1 and w2 == 2:
                    text = v2.decode("utf-8", errors="replace")
            pieces.append(text)
        elif field_no == 3 and wire == 2:  # NormalizerSpec
            normalizer = hashlib.sha256(value).hexdigest()
    if not pieces:
        raise ValueError("no pieces")
    return pieces, normalizer
