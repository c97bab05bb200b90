"""User-facing errors shared by every layer (no heavy imports).

Public API:
    DraftPairError(message, detail="")   an error whose message is written for the user;
        ``detail`` keeps the technical text for ``-v`` and a details pane
    ModelLoadError
    user_message(exc, *, folder=None, file=None) -> str   one plain sentence, whatever the exception
    technical_detail(exc) -> str          the exception chain as text, for ``-v`` / a details pane
    names_a_setting(exc) -> bool          a config value missing or of the wrong type
    (a failed model or tokenizer load: app.checkpoints.load_errors)

The one place that turns exceptions into sentences: a sentence names the file and what is
wrong with it, never an exception class or a constructor signature.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path


class DraftPairError(Exception):
    """An error whose message is written for the user (one plain sentence)."""

    def __init__(self, message: str = "", detail: str = ""):
        super().__init__(message)
        self.detail = detail


class ModelLoadError(DraftPairError):
    pass


_MISSING_ARGS = re.compile(r"missing \d+ required (?:positional |keyword-only )?arguments?: (.*)")
_QUOTED = re.compile(r"'([^']+)'")
_SHAPE = re.compile(r"Expected shape \(([^)]*)\) but received shape \(([^)]*)\) for parameter (\S+)")
_MISSING_PARAMS = re.compile(r"Missing (\d+) parameters?:\s*(.*)", re.S)
_EXTRA_PARAMS = re.compile(r"Received (\d+) parameters? not in model:\s*(.*)", re.S)
_FIELD_TYPE = re.compile(r"Field '(\w+)' expected (\w+), got (\w+)(?: \(value: (.*)\))?")
_TYPE_NAMES = {"int": "a whole number", "float": "a number", "bool": "true or false",
               "str": "text", "list": "a list", "dict": "an object"}
_MODEL_TYPE = re.compile(r"Model type (\S+) not supported")
_TYPE_WORDS = ("NoneType", "non-int", "unsupported operand", "not subscriptable",
               "object is not iterable", "must be", "argument", "can't multiply",
               "object cannot be interpreted", "not supported between instances")


def _where(folder: str | Path | None, file: str | Path | None, name: str) -> str:
    if file is not None:
        return str(file)
    if folder is not None:
        return f"{name} in {folder}"
    return name


def _names(text: str, limit: int = 6) -> str:
    found = _QUOTED.findall(text) or [t.strip().rstrip(".") for t in text.split(",") if t.strip()]
    shown = ", ".join(found[:limit])
    return shown + (f" and {len(found) - limit} more" if len(found) > limit else "")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, KeyError) and exc.args:
        text = str(exc.args[0])
    return text.splitlines()[0].strip() if text else ""


def user_message(
    exc: BaseException,
    *,
    folder: str | Path | None = None,
    file: str | Path | None = None,
    model_type: str | None = None,
) -> str:
    """One plain line for a user, whatever the exception (``folder``/``file`` name the place)."""
    text = _message(exc, folder, file, model_type)
    first = text.split(" ", 1)[0]
    return text if "." in first or "/" in first else text[:1].upper() + text[1:]


def _message(exc, folder, file, model_type) -> str:
    if isinstance(exc, DraftPairError):
        return str(exc) or "DraftPair could not finish this."
    plain = getattr(exc, "plain_message", None)  # lower layers' own sentences (resources)
    if isinstance(plain, str) and plain:
        return plain
    text = _first_line(exc)
    cfg = _where(folder, None, "config.json")
    weights = _where(folder, file, "the weight files")
    m = _MISSING_ARGS.search(text)
    if m and isinstance(exc, TypeError):
        who = f"a {model_type} model" if model_type else "this kind of model"
        return f"{cfg} lacks {_names(m.group(1))} that {who} needs."
    m = _FIELD_TYPE.search(str(exc))
    if m:
        value = m.group(4) if m.group(4) is not None else f"a {m.group(3)} value"
        want = _TYPE_NAMES.get(m.group(2), m.group(2))
        return f"In {cfg}, {m.group(1)} is {value} but must be {want}."
    if "custom module" in text and "trust_remote_code" in text:
        return (f"{_where(folder, None, 'The model')} needs its own Python code to run, which "
                "DraftPair never runs.")
    m = _MODEL_TYPE.search(text)
    if m:
        return f"The installed mlx-lm cannot run this kind of model ({m.group(1)}); see {cfg}."
    m = _SHAPE.search(text)
    if m:
        return (f"Tensor {m.group(3)} in {weights} has shape ({m.group(2)}) but {cfg} describes "
                f"({m.group(1)}): the settings and the weights belong to different models.")
    m = _MISSING_PARAMS.search(str(exc))
    if m:
        return (f"{weights} lack {m.group(1)} tensor(s) the model in {cfg} needs "
                f"(for example {_names(m.group(2), 3)}): the settings and weights do not match.")
    m = _EXTRA_PARAMS.search(str(exc))
    if m:
        return (f"{weights} hold {m.group(1)} tensor(s) that the model in {cfg} does not have "
                f"(for example {_names(m.group(2), 3)}): the settings and weights do not match.")
    if "[read] Unable to read" in text or "[load_safetensors]" in text or (
        "parse error" in text and "json.exception" in text
    ):
        return f"{weights} is truncated or not a safetensors file (an interrupted download?)."
    if "Unable to write" in text and ("[write]" in text or "[save" in text):
        place = str(file or folder or "")  # MLX could not write a file: almost always a full disk
        return (f"The disk{' holding ' + place if place else ''} is full or cannot be written; "
                "free some space and try again.")
    if isinstance(exc, MemoryError):
        return "There is not enough memory for this; close other programs or pick a smaller model."
    if isinstance(exc, UnicodeDecodeError):
        return f"{_where(folder, file, 'The file')} is not text (it holds binary data)."
    if type(exc).__name__ == "JSONDecodeError":
        lineno, colno = getattr(exc, "lineno", "?"), getattr(exc, "colno", "?")
        return f"{_where(folder, file, 'A settings file')} is not valid JSON (line {lineno}, column {colno})."
    if isinstance(exc, OSError):
        return _os_message(exc, file or folder)
    if type(exc).__name__ in ("DatabaseError", "OperationalError", "IntegrityError"):
        return f"{_where(folder, file, 'The database')} is damaged or locked ({text})."
    if isinstance(exc, KeyError):
        if file is not None:
            return f"{file} lacks the entry {text!r}."
        return f"{cfg} lacks the setting {text!r}."
    if isinstance(exc, TypeError) and any(w in text for w in _TYPE_WORDS):
        return (f"A setting in {cfg} is missing a value or has the wrong type "
                "(for example text where a number belongs).")
    if isinstance(exc, RecursionError):
        return f"{_where(folder, file, 'A file')} nests too deeply to be read."
    if text:
        return f"{text[0].upper()}{text[1:]}" + ("" if text.endswith((".", "!", "?")) else ".")
    return "DraftPair hit an unexpected problem (details with -v)."


def _os_message(exc: OSError, where: str | Path | None) -> str:
    if getattr(exc, "plain_sentence", False):
        return str(exc)
    place = str(exc.filename) if exc.filename else (str(where) if where else "A file")
    code = exc.errno
    if isinstance(exc, FileNotFoundError) or code == errno.ENOENT:
        return f"{place} does not exist."
    if isinstance(exc, PermissionError) or code in (errno.EACCES, errno.EPERM):
        return f"{place} cannot be opened: permission denied (check its owner and permissions)."
    if code == errno.ENOSPC:
        if not (exc.filename or where):
            return "The disk is full; free some space and try again."
        return f"The disk holding {place} is full; free some space and try again."
    if code == errno.EROFS:
        return f"{place} is on a read-only disk."
    if code == errno.ELOOP:
        return f"{place} is a symbolic link that points to itself (a link loop)."
    if isinstance(exc, IsADirectoryError):
        return f"{place} is a folder, not a file."
    if isinstance(exc, NotADirectoryError):
        return f"{place} is a file, not a folder."
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return "The connection failed; check the network and try again."
    return f"{place} cannot be used: {exc.strerror or _first_line(exc) or 'input/output error'}."


def technical_detail(exc: BaseException) -> str:
    """The exception and its causes, one per line, as a programmer would want them."""
    lines: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        extra = getattr(cur, "detail", "")
        lines.append(f"{type(cur).__name__}: {cur}" + (f" [{extra}]" if extra else ""))
        cur = cur.__cause__ or cur.__context__
    return "\n".join(lines)


def names_a_setting(exc: BaseException) -> bool:
    """Whether ``exc`` is about a config value (missing or of the wrong type)."""
    return bool(_FIELD_TYPE.search(str(exc)) or _MISSING_ARGS.search(str(exc)))
