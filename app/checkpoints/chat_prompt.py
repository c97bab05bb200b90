"""A conversation turned into a prompt through the model's chat template, by the guarded
renderer (``app.checkpoints.chat_template``): the engine, the checks and the demo tools all
render this way.

Public API:
    template_source(folder) -> str | None     the file the folder's chat template is read from
    template_variables(tokenizer) -> dict      what a template sees beside the messages
    chat_text(tokenizer, messages, *, model, folder=None, add_generation_prompt=True) -> str
    chat_tokens(tokenizer, messages, *, model, folder=None, add_generation_prompt=True)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.checkpoints.chat_template import render_chat


def template_source(folder: str | Path | None) -> str | None:
    if folder is None:
        return None
    folder = Path(folder)
    for name in ("chat_template.jinja", "chat_template.json", "tokenizer_config.json"):
        if (folder / name).is_file():
            return name
    return None


def template_variables(tokenizer: Any) -> dict[str, Any]:
    """The special tokens by name and the thinking switch, as transformers and mlx-lm pass."""
    out: dict[str, Any] = {}
    specials = getattr(tokenizer, "special_tokens_map", None)
    if isinstance(specials, dict):
        out.update({k: v for k, v in specials.items() if isinstance(v, (str, list))})
    flag = getattr(tokenizer, "_thinking_kwarg", None)
    if isinstance(flag, str):
        out[flag] = bool(getattr(tokenizer, "has_thinking", False))
    return out


def _template(tokenizer: Any) -> str | None:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: the default one
        template = template.get("default") or next(iter(template.values()), None)
    return template if isinstance(template, str) else None


def chat_text(tokenizer: Any, messages: list[dict[str, Any]], *, model: str = "this model",
              folder: str | Path | None = None, add_generation_prompt: bool = True) -> str:
    template = _template(tokenizer)
    if template is None or getattr(tokenizer, "_chat_template", None) is not None:
        # mlx-lm's own Python template for a family (code that ships with mlx-lm, not the model)
        return str(tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=False))
    return render_chat(template, messages, model=model, add_generation_prompt=add_generation_prompt,
                       variables=template_variables(tokenizer), source=template_source(folder))


def chat_tokens(tokenizer: Any, messages: list[dict[str, Any]], *, model: str = "this model",
                folder: str | Path | None = None, add_generation_prompt: bool = True) -> list[int]:
    text = chat_text(tokenizer, messages, model=model, folder=folder,
                     add_generation_prompt=add_generation_prompt)
    return list(tokenizer.encode(text, add_special_tokens=False))
