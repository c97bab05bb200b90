"""The limits a chat template is filled in under: sizes predicted before values are built,
steps counted, a time budget (used by ``app.checkpoints.chat_template``).

Public API:
    Limits(chars, per_input_char, steps, seconds)   the defaults suit any real conversation
    TemplateLimit                                   raised when a template asks for more
    Budget(limits, input_chars, messages)           one render's allowance; ``local.budget``
    text_size(value, limit) -> int                  about how long ``str(value)`` is
    binop, method_size, sized, ints_bounded, Buffer, guard_filter and the sized filters
"""

from __future__ import annotations

import json
import re
import string
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Limits:
    chars: int = 2_000_000          # largest value or output, plus per_input_char per input char
    per_input_char: int = 8
    steps: int = 500_000            # template lines run and macros called, plus 1,000 a message
    seconds: float = 10.0


class TemplateLimit(Exception):
    """A template asked for more than the limits allow (the message says what)."""


MAX_DEPTH = 64


class Budget:
    def __init__(self, limits: Limits, input_chars: int, messages: int):
        self.chars = limits.chars + limits.per_input_char * input_chars
        self.steps = limits.steps + 1_000 * messages
        self.deadline = time.monotonic() + limits.seconds
        self.seconds = limits.seconds
        self.used = 0
        self.tripped: str | None = None

    def trip(self, why: str) -> TemplateLimit:
        self.tripped = self.tripped or why
        return TemplateLimit(self.tripped)

    def check(self) -> None:
        if self.tripped:
            raise TemplateLimit(self.tripped)

    def size(self, n: int, what: str = "a value") -> None:
        if n > self.chars:
            raise self.trip(f"it builds {what} longer than {self.chars:,} characters")

    def step(self) -> None:
        self.used += 1
        if self.used > self.steps:
            raise self.trip(f"it runs more than {self.steps:,} steps")
        if not self.used & 1023 and time.monotonic() > self.deadline:
            raise self.trip(f"it takes longer than {self.seconds:g} seconds")


local = threading.local()


def current() -> Budget:
    budget = getattr(local, "budget", None)
    if budget is None:  # compile-time constant folding: the default limits
        budget = local.budget = Budget(Limits(), 0, 0)
    budget.check()
    return budget


def text_size(value: Any, limit: int) -> int:
    """About how long ``str(value)`` (or its JSON) is, counting no further than ``limit``."""
    total = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (str, bytes)):
            total += len(item) + 2
        elif isinstance(item, int):
            total += item.bit_length() // 3 + 2
        elif isinstance(item, dict):
            if depth >= MAX_DEPTH:
                raise current().trip("it nests values too deeply")
            total += 2 + 4 * len(item)
            stack.extend((k, depth + 1) for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            if depth >= MAX_DEPTH:
                raise current().trip("it nests values too deeply")
            total += 2 + 2 * len(item)
            stack.extend((v, depth + 1) for v in item)
        else:
            total += 32
        if total > limit:
            return total
    return total


def _length(value: Any) -> int | None:
    if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
        return len(value)
    return None


def sized(value: Any, what: str = "a value") -> Any:
    n = _length(value)
    if n is not None:
        current().size(n, what)
    return value


def ints_bounded(args: tuple, kwargs: dict) -> None:
    budget = current()
    for v in (*args, *kwargs.values()):
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > budget.chars:
            raise budget.trip(f"it asks for a size of {v:,}")


_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])")


def _printf_size(fmt: str, args: Any) -> int:
    values = args if isinstance(args, tuple) else (args,)
    budget = current()
    biggest = max((text_size(v, budget.chars) for v in values), default=0)
    if isinstance(args, dict):
        biggest = max(biggest, text_size(args, budget.chars))
    total = len(fmt)
    for m in _PRINTF.finditer(fmt):
        width = sum(int(g) if g and g != "*" else 0 for g in m.group(1, 2))
        stars = [v for v in values if isinstance(v, int)] if "*" in m.group(0) else []
        total += width + sum(abs(s) for s in stars) + biggest
    return total


def _format_size(fmt: str, args: tuple, kwargs: dict) -> int:
    budget = current()
    biggest = max((text_size(v, budget.chars) for v in (*args, *kwargs.values())), default=0)
    total = 0
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        return len(fmt)
    for literal, field, spec, _conv in parsed:
        total += len(literal)
        if field is not None:
            numbers = [int(n) for n in re.findall(r"\d+", spec or "")]
            nested = "{" in (spec or "")
            total += biggest + sum(numbers) + (budget.chars + 1 if nested else 0)
    return total


def binop(op: str, left: Any, right: Any) -> Any:
    budget = current()
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(n, int) and _length(seq) is not None and not isinstance(seq, dict):
                budget.size(len(seq) * max(n, 0), "a repeated value")
        if isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > 65_536:
                raise budget.trip("it computes a number too large")
        return sized(left * right)
    if op == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0:
            if max(left.bit_length() - 1, 1) * right > 65_536 and abs(left) > 1:
                raise budget.trip("it computes a number too large")
        return left**right
    if op == "%":
        if isinstance(left, (str, bytes)):
            budget.size(_printf_size(str(left), right), "a formatted text")
        return sized(left % right)
    if op == "+":
        a, b = _length(left), _length(right)
        if a is not None and b is not None:
            budget.size(a + b, "a joined value")
        return left + right
    raise AssertionError(op)


def method_size(obj: Any, args: tuple, kwargs: dict) -> int | None:
    """The size a string method's result could reach, for the ones that can grow."""
    owner = getattr(obj, "__self__", None)
    name = getattr(obj, "__name__", "")
    if not isinstance(owner, (str, bytes)):
        return None
    budget = current()
    if name == "join" and args:
        items = args[0]
        if isinstance(items, (list, tuple, str)):
            return len(items) * len(owner) + text_size(list(items), budget.chars)
        return None
    if name == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        count = owner.count(old) if old else len(owner) + 1
        return len(owner) + count * max(len(new) - len(old), 0)
    if name == "expandtabs":
        width = int(args[0]) if args and isinstance(args[0], int) else 8
        tabs = owner.count("\t") if isinstance(owner, str) else owner.count(b"\t")
        return len(owner) + tabs * width
    if name == "translate" and args and isinstance(args[0], dict):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        return len(owner) * max(longest, 1)
    if name in ("format", "format_map") and isinstance(owner, str):
        values = args[0] if name == "format_map" and args else None
        if isinstance(values, dict):
            return _format_size(owner, (), values)
        return _format_size(owner, args, kwargs)
    return None


class Buffer(list):
    """A block's output as it is written: its length is checked at each piece."""

    total = 0

    def append(self, part: Any) -> None:
        self.total += len(part) if isinstance(part, str) else text_size(part, current().chars)
        current().size(self.total, "an output")
        super().append(part)

    def extend(self, parts: Any) -> None:
        for part in parts:
            self.append(part)


def guard_filter(func: Any) -> Any:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        ints_bounded(args, kwargs)
        return sized(func(*args, **kwargs))

    guarded.__dict__.update(getattr(func, "__dict__", {}))  # keeps jinja's pass_context marks
    return guarded


def join_filter(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> str:
    budget = current()
    parts: list[str] = []
    total = 0
    for i, item in enumerate(value):
        if attribute is not None:
            item = eval_ctx.environment.getitem(item, attribute)
        budget.size(total + text_size(item, budget.chars), "a joined text")
        text = str(item)
        total += len(text) + (len(d) if i else 0)
        budget.size(total, "a joined text")
        parts.append(text)
    return str(d).join(parts)


def indent_filter(s: str, width: Any = 4, first: bool = False, blank: bool = False) -> str:
    from jinja2.filters import do_indent

    pad = len(width) if isinstance(width, str) else int(width)
    current().size(len(str(s)) + (str(s).count("\n") + 1) * max(pad, 0), "an indented text")
    return do_indent(s, width, first, blank)


def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    budget = current()
    pad = len(indent) if isinstance(indent, str) else int(indent or 0)
    if pad > 64:
        raise budget.trip(f"it asks for an indent of {pad:,}")
    budget.size(text_size(x, budget.chars) * (1 + pad), "a JSON text")
    return sized(json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                             sort_keys=sort_keys), "a JSON text")


def sum_filter(env: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    from jinja2.filters import do_sum

    if not isinstance(start, (int, float)):
        raise current().trip("it sums values that are not numbers")
    return do_sum(env, iterable, attribute, start)


def raise_exception(message: Any) -> None:
    from jinja2.exceptions import TemplateError

    raise TemplateError(str(message)[:500])


def strftime_now(fmt: str) -> str:
    return datetime.now().strftime(str(fmt)[:200])


