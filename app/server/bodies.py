"""Request bodies -> JSON objects a client cannot use against the server.

``parse_json(raw)`` turns the bytes of a body into a dict or raises ``ApiError`` (400, OpenAI's
error shape) naming what is wrong, and where: bytes that are not UTF-8, text that is not JSON,
``NaN``/``Infinity`` (not JSON), nesting deeper than ``MAX_DEPTH``, an unpaired surrogate or a
NUL character in any string (keys included). A whole number too long to convert (Python stops
at 4,300 digits) becomes an infinite float, so the field that holds it is refused by its own
range check with its name, instead of the whole body failing as a server error.

``field_name(path)`` spells a path the way error messages name fields: ``messages[0].role``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from app.server.errors import ApiError

MAX_DEPTH = 32  # OpenAI bodies nest 5 deep; 32 leaves room and stops recursion bombs
MAX_INT_DIGITS = 4000  # below Python's own limit for converting digits to an int
SHOWN_CHARS = 60  # of a bad value, in a message

_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"The request body is not UTF-8 text (unreadable byte at position "
                       f"{exc.start}).", code="invalid_json") from None
    try:
        body = json.loads(text, parse_constant=_refuse_constant, parse_int=_parse_int)
    except RecursionError:
        raise ApiError(400, f"The request body nests deeper than {MAX_DEPTH} levels.",
                       code="invalid_json") from None
    except ValueError as exc:  # JSONDecodeError is one
        raise ApiError(400, f"The request body is not valid JSON ({_first_line(exc)}).",
                       code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_json")
    check_tree(body)
    return body


def check_tree(body: Any) -> None:
    """Refuse nesting past ``MAX_DEPTH`` and strings that are not plain Unicode text, naming
    the field. Iterative, so no body can exhaust the stack."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(body, ())]
    while stack:
        value, path = stack.pop()
        if len(path) > MAX_DEPTH:
            raise ApiError(400, f"The request body nests deeper than {MAX_DEPTH} levels (at "
                           f"'{field_name(path[:MAX_DEPTH])}').", code="invalid_json",
                           param=field_name(path[:1]))
        if isinstance(value, str):
            _check_text(value, path)
        elif isinstance(value, dict):
            for key, item in value.items():
                _check_text(key, (*path, key))
                stack.append((item, (*path, key)))
        elif isinstance(value, list):
            stack.extend((item, (*path, i)) for i, item in enumerate(value))


def _check_text(value: str, path: tuple[str | int, ...]) -> None:
    name = field_name(path) or "the request body"
    if _SURROGATE.search(value):
        raise ApiError(400, f"'{name}' holds an unpaired surrogate (a \\ud800-\\udfff escape on "
                       "its own), which is not Unicode text.", param=name)
    if "\x00" in value:
        raise ApiError(400, f"'{name}' holds a NUL character (binary data, not text).",
                       param=name)


def field_name(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            part = shown(part, quote=False)
            out += f".{part}" if out else part
    return out


def shown(value: Any, *, quote: bool = True) -> str:
    """A client's value for a message: its repr (or text), cut to ``SHOWN_CHARS``, with
    surrogates and control characters escaped (a message must be encodable text)."""
    text = repr(value) if quote else str(value)
    text = text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _refuse_constant(name: str) -> Any:
    raise ApiError(400, f"The request body is not valid JSON ({name} is not a JSON number).",
                   code="invalid_json")


def _parse_int(digits: str) -> int | float:
    if len(digits) > MAX_INT_DIGITS:  # too long to be any count: out of every range
        return float("-inf") if digits.startswith("-") else float("inf")
    return int(digits)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
