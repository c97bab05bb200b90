"""Chat templates filled in with limits: the one path every prompt and every check renders by.

Public API:
    render_chat(template, messages, *, model, add_generation_prompt=True, variables=None,
                source=None, limits=None) -> str
    TemplateRefused(DraftPairError)   the template itself is refused, whatever the messages
    check_template(template, *, model, variables=None, source=None) -> str | None
        None when the template fills in a sample conversation within the limits, else the
        plain sentence that refuses it (a syntax error, a limit)
    Limits(chars=..., per_input_char=..., steps=..., seconds=...)

A chat template is code that ships with a model. Jinja's sandbox stops it reaching Python's
internals, not from asking for ``'x' * 10**9``: here every operation that can make a large
value (repetition, formatting, joining, padding, filters, output) is sized before it runs,
loops and macro calls are counted, and the render has a time budget, so a hostile template
is refused in one sentence instead of exhausting memory.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from app.checkpoints.template_limits import (
    MAX_DEPTH,
    Budget,
    Buffer,
    Limits,
    TemplateLimit,
    binop,
    current,
    guard_filter,
    indent_filter,
    ints_bounded,
    join_filter,
    local,
    method_size,
    raise_exception,
    sized,
    strftime_now,
    sum_filter,
    text_size,
    tojson,
)
from app.errors import DraftPairError

__all__ = ["Limits", "TemplateLimit", "TemplateRefused", "check_template", "render_chat"]


class TemplateRefused(DraftPairError):
    """The template itself is refused (a mistake in it, or more than the limits allow)."""

_LITERAL_TAG = "<template>"  # the file name jinja gives a template compiled from text

_ENV: Any = None
_ENV_LOCK = threading.Lock()


def _environment() -> Any:
    """One guarded environment, configured like transformers' (trim_blocks, lstrip_blocks,
    loop controls, ``{% generation %}``, tojson, raise_exception, strftime_now, namespace)."""
    global _ENV
    with _ENV_LOCK:
        if _ENV is None:
            _ENV = _make_environment()
        return _ENV


def _make_environment() -> Any:
    import jinja2
    import jinja2.ext
    from jinja2 import nodes
    from jinja2.compiler import CodeGenerator
    from jinja2.filters import pass_environment, pass_eval_context
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        tags = {"generation"}  # the assistant-mask marks: rendered as their body

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body).set_lineno(lineno)

    class Generator(CodeGenerator):
        def buffer(self, frame: Any) -> None:  # a block's text, counted as it grows
            frame.buffer = self.temporary_identifier()
            self.writeline(f"{frame.buffer} = environment.guarded_buffer()")

        def visit_Concat(self, node: Any, frame: Any) -> None:  # ``a ~ b``: sized first
            self.write("environment.guarded_concat((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    class Namespace(jinja2.utils.Namespace):  # no underscore names (transformers' rule too)
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            if any(isinstance(k, str) and k.startswith("_") for k in attrs):
                raise jinja2.exceptions.SecurityError("underscore names are not allowed")
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError("underscore names are not allowed")
            jinja2.utils.Namespace.__setitem__(self, name, value)

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict:
            return sized(dict(*args, **kwargs))

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
            return sized(dict.fromkeys(*args, **kwargs))

    class Guarded(ImmutableSandboxedEnvironment):
        code_generator_class = Generator
        intercepted_binops = frozenset({"*", "**", "%", "+"})

        def __init__(self) -> None:
            super().__init__(trim_blocks=True, lstrip_blocks=True,
                             extensions=[Generation, jinja2.ext.loopcontrols],
                             finalize=self._finalize)
            # jinja2 joins blocks, macros and the whole output through this attribute
            self.concat = self._concat  # type: ignore[method-assign]

        @staticmethod
        def _finalize(value: Any) -> Any:
            budget = current()
            if not isinstance(value, str):
                budget.size(text_size(value, budget.chars), "an output")
            return value

        @staticmethod
        def _concat(parts: Any) -> str:
            budget = current()
            out: list[str] = []
            total = 0
            for part in parts:
                total += len(part)
                budget.size(total, "an output")
                out.append(part)
            return "".join(out)

        @staticmethod
        def guarded_buffer() -> list:
            return Buffer()

        def wrap_str_format(self, value: Any) -> Any:
            inner = super().wrap_str_format(value)
            if inner is None:
                return None

            def sized_format(*args: Any, **kwargs: Any) -> str:
                size = method_size(value, args, kwargs)
                if size is not None:
                    current().size(size, "a formatted text")
                return sized(inner(*args, **kwargs))

            return sized_format

        def guarded_concat(self, values: tuple) -> str:
            budget = current()
            budget.size(sum(text_size(v, budget.chars) for v in values), "a joined text")
            return "".join(map(str, values))

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            return binop(operator, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            budget = current()
            ints_bounded(args, kwargs)
            size = method_size(__obj, args, kwargs)
            if size is not None:
                budget.size(size, "a text")
            return sized(super().call(__context, __obj, *args, **kwargs))

    env = Guarded()
    for name, func in list(env.filters.items()):
        env.filters[name] = guard_filter(func)
    env.filters["join"] = guard_filter(pass_eval_context(join_filter))
    env.filters["indent"] = guard_filter(indent_filter)
    env.filters["tojson"] = guard_filter(tojson)
    env.filters["sum"] = guard_filter(pass_environment(sum_filter))
    env.globals.pop("lipsum", None)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = Namespace
    return env


_COMPILED: dict[str, Any] = {}


def _compile(template: str) -> Any:
    found = _COMPILED.get(template)
    if found is None:
        local.budget = Budget(Limits(), 0, 0)
        try:
            found = _environment().from_string(template)
        finally:
            local.budget = None
        if len(_COMPILED) > 16:
            _COMPILED.clear()
        _COMPILED[template] = found
    return found


def _tracer(budget: Budget) -> Any:
    """Counts lines run inside the template's own code (loops, macro calls) and keeps time."""

    def trace_line(frame: Any, event: str, arg: Any) -> Any:
        budget.step()
        return trace_line

    def global_(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename == _LITERAL_TAG:
            budget.step()
            return trace_line
        if time.monotonic() > budget.deadline:
            raise budget.trip(f"it takes longer than {budget.seconds:g} seconds")
        return None

    return global_


def _plain(value: Any, depth: int = 0) -> Any:
    """What the template may see: JSON-like data only (no objects with methods)."""
    if depth > MAX_DEPTH:
        raise DraftPairError("The conversation nests values too deeply to be shown to a model.")
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    return str(value)


def render_chat(
    template: str,
    messages: list[dict[str, Any]],
    *,
    model: str,
    add_generation_prompt: bool = True,
    variables: dict[str, Any] | None = None,
    source: str | None = None,
    limits: Limits | None = None,
) -> str:
    """The template filled in with ``messages`` (and ``variables``: special tokens, flags)
    within ``limits``; a ``DraftPairError`` naming ``model`` (and ``source``, the file the
    template came from) when it cannot be."""
    import jinja2

    where = f"the chat template of {model}" + (f" (in {source})" if source else "")
    try:
        compiled = _compile(template)
    except TemplateLimit as exc:
        raise TemplateRefused(f"{_cap(where)} is refused: {exc}.") from None
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateRefused(
            f"{_cap(where)} has a mistake on line {exc.lineno}: {_short(exc.message or exc)}.",
            detail=str(exc)) from None
    except (jinja2.TemplateError, RecursionError, MemoryError, ValueError) as exc:
        raise TemplateRefused(f"{_cap(where)} cannot be read ({_short(exc)}).") from None
    data = _plain(list(messages))
    input_chars = text_size(data, 1 << 62) + text_size(variables or {}, 1 << 62)
    budget = Budget(limits or Limits(), input_chars, len(data))
    context = dict(_plain(dict(variables or {})))
    context.update(messages=data, add_generation_prompt=add_generation_prompt)
    previous = sys.gettrace()
    local.budget = budget
    sys.settrace(_tracer(budget))
    try:
        text = compiled.render(**context)
        budget.check()
    except TemplateLimit:
        raise TemplateRefused(f"{_cap(where)} is refused: {budget.tripped}.") from None
    except RecursionError:
        raise TemplateRefused(f"{_cap(where)} is refused: it calls itself too deeply.") from None
    except MemoryError:
        raise TemplateRefused(f"{_cap(where)} is refused: it runs out of memory.") from None
    except jinja2.exceptions.SecurityError:
        raise TemplateRefused(f"{_cap(where)} is refused: it reaches for Python's internals, "
                              "which a template may not.") from None
    except Exception as exc:  # the template's own refusal, or a mistake met at run time
        if budget.tripped:
            raise TemplateRefused(f"{_cap(where)} is refused: {budget.tripped}.") from None
        said = "refused this conversation:" if isinstance(exc, jinja2.TemplateError) else (
            "failed on this conversation:")
        raise DraftPairError(f"{_cap(where)} {said} {_short(exc)}.", detail=repr(exc)) from None
    finally:
        sys.settrace(previous)
        local.budget = None
    return text


SAMPLE = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi, how can I help?"},
    {"role": "user", "content": "Tell me a short story."},
]


def check_template(template: str, *, model: str, variables: dict[str, Any] | None = None,
                   source: str | None = None) -> str | None:
    """None when ``template`` fills in a sample conversation within the limits (or refuses
    the sample in its own words: a template may reject a system turn), else the refusal."""
    for sample in (SAMPLE, SAMPLE[1:]):
        try:
            render_chat(template, sample, model=model, variables=variables, source=source)
            return None
        except TemplateRefused as exc:
            return str(exc)
        except DraftPairError:
            continue
    return None


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _short(exc: object) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else "an error"
    return text[:200].rstrip(".")
