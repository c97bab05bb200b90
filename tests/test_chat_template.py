"""Chat templates are code that ships with a model: they are filled in under limits on size,
steps and time, and a template that asks for more is refused in one sentence naming the model,
by ``check`` and by a reply alike. Ordinary templates render exactly as transformers does."""

from __future__ import annotations

import json
import resource

import pytest

from app.checkpoints.chat_template import Limits, TemplateRefused, check_template, render_chat
from app.errors import DraftPairError

HOSTILE = {
    "repeat": "{{ 'x' * 10**9 }}",
    "repeat a literal": "{{ 'x' * 1000000000 }}",
    "pad": "{{ 'x'|center(1000000000) }}",
    "pad by method": "{{ 'x'.ljust(1000000000) }}",
    "format width": "{{ '{:>1000000000}'.format(1) }}",
    "printf width": "{{ '%1000000000d' % 1 }}",
    "printf precision": "{{ '%.900000000f' % 1 }}",
    "printf star": "{{ '%*d' % (1000000000, 1) }}",
    "replace empty": "{% set s = 'x' * 1000000 %}{{ s.replace('', s) }}",
    "doubling concat": "{% set ns = namespace(s='x') %}{% for i in range(60) %}"
                       "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "doubling list": "{% set ns = namespace(s=[1]) %}{% for i in range(60) %}"
                     "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
    "shared nesting": "{% set a = [[1]*1000]*1000 %}{% set b = [a]*1000 %}{{ b }}",
    "join": "{% set a = ['x'*1000000]*1000 %}{{ a|join }}",
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                    "{% endfor %}",
    "loops without calls": "{% set l = 'x'*1000000 %}{% for a in l %}{% for b in l %}"
                           "{% endfor %}{% endfor %}",
    "exponential macro": "{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}"
                         "{% endmacro %}{{ f(40) }}",
    "endless macro": "{% macro f(n) %}{{ f(n+1) }}{% endmacro %}{{ f(0) }}",
    "huge number": "{% set ns = namespace(n=10) %}{% for i in range(40) %}"
                   "{% set ns.n = ns.n * ns.n %}{% endfor %}ok",
    "indent": "{% set s = '\\n' * 1000000 %}{{ s|indent(1000000) }}",
    "json": "{% set a = [[1]*1000]*1000 %}{{ a|tojson(indent=2) }}",
    "block": "{% set s %}{% for i in range(100000) %}{{ 'x'*100000 }}{% endfor %}{% endset %}"
             "{{ s|length }}",
    "tabs": "{% set s = '\\t' * 1000000 %}{{ s.expandtabs(1000000) }}",
    "batch fill": "{% for b in range(1000)|batch(1000000000, 'x') %}{% endfor %}",
    "sum of lists": "{{ [[1]*1000000]*1000|sum(start=[]) }}",
    "output": "{% for i in range(100000) %}{{ 'x'*1000 }}{% endfor %}",
    "translate": "{% set s = 'x' * 1000000 %}{{ s.translate({120: 'y'*1000000}) }}",
    "escape": "{{ ''.__class__.__mro__ }}",
}
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_template_is_refused_in_a_sentence(name):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(TemplateRefused) as caught:
        render_chat(HOSTILE[name], MESSAGES, model="tiny-model")
    text = str(caught.value)
    assert text.startswith("The chat template of tiny-model is refused: ") and text.endswith(".")
    assert "\n" not in text and "Error" not in text and "Traceback" not in text
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 400, f"{name}: the peak grew by {grown_mb:.0f} MB"


def test_limits_scale_with_the_conversation():
    long = [{"role": "user", "content": "word " * 400_000}]  # 2 MB: more than the base limit
    text = render_chat("{% for m in messages %}{{ m.content }}{% endfor %}", long, model="m")
    assert len(text) == 2_000_000
    with pytest.raises(TemplateRefused, match="longer than"):
        render_chat("{{ messages[0].content * 20 }}", long, model="m")
    with pytest.raises(TemplateRefused, match="steps"):
        render_chat("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                    MESSAGES, model="m", limits=Limits(steps=1000))


def test_a_syntax_error_names_the_file_and_line():
    with pytest.raises(TemplateRefused) as caught:
        render_chat("hello\n{% for m in %}", MESSAGES, model="tiny", source="chat_template.jinja")
    assert str(caught.value).startswith("The chat template of tiny (in chat_template.jinja) has "
                                        "a mistake on line 2: ")


def test_the_templates_own_refusal_is_not_a_refusal_of_the_template():
    strict = ("{% if messages[0].role == 'system' %}{{ raise_exception('System role not "
              "supported') }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(DraftPairError, match="refused this conversation: System role not"):
        render_chat(strict, [{"role": "system", "content": "s"}], model="m")
    assert check_template(strict, model="m") is None  # the sample without a system turn works
    assert "is refused" in check_template(HOSTILE["repeat"], model="m")


KITCHEN_SINK = """{%- set ns = namespace(found=false, n=0) -%}
{%- for message in messages -%}
  {%- if loop.first and message['role'] != 'system' %}{{ bos_token }}{% endif -%}
  {%- set ns.n = ns.n + 1 -%}
  {%- if message.role == 'assistant' %}{% generation %}{{ message.content|trim }}{% endgeneration %}
  {%- elif message.content is string %}<|{{ message.role }}|>{{ message.content.strip() }}
  {%- else %}{{ message.content|tojson }}{% endif %}
  {%- if not loop.last %}{{ '\\n' }}{% endif -%}
{%- endfor -%}
{%- if tools %}{{ tools|tojson(indent=2) }}{% endif -%}
{{ ns.n ~ ':' ~ (messages|map(attribute='role')|join(',')) }}
{%- for k, v in dict(a=1, b=[1, 2])|dictsort %}{{ k }}={{ v }};{% endfor %}
{{ '%s-%03d'|format('x', 7) }} {{ 'a,b'.split(',')|length }} {{ "{0}+{1}".format(1, 2) }}
{%- if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not
enable_thinking %}<think></think>{% endif %}{% endif %}"""


def test_ordinary_templates_render_as_transformers_does():
    from transformers.utils.chat_template_utils import render_jinja_template

    convo = [{"role": "user", "content": "  hi <|im_end|> ü 🎉 "},
             {"role": "assistant", "content": "hello "},
             {"role": "user", "content": [{"type": "text", "text": "x"}]}]
    for extra in ({}, {"enable_thinking": False}, {"tools": [{"name": "t", "x": [1, "2"]}]}):
        for gen in (True, False):
            ours = render_chat(KITCHEN_SINK, convo, model="m", add_generation_prompt=gen,
                               variables={"bos_token": "<s>", **extra})
            theirs, _ = render_jinja_template([convo], chat_template=KITCHEN_SINK,
                                              add_generation_prompt=gen, bos_token="<s>", **extra)
            assert ours == theirs[0]


def _tiny(root, template):
    from tests.builders import make_checkpoint

    folder = make_checkpoint(root / "hostile-tiny", seed=7)
    cfg = folder / "tokenizer_config.json"
    data = json.loads(cfg.read_text())
    data.pop("chat_template", None)
    cfg.write_text(json.dumps(data))
    (folder / "chat_template.jinja").write_text(template)
    return folder


def test_check_refuses_a_hostile_template(tmp_path, capsys):
    from app.cli import main

    folder = _tiny(tmp_path, HOSTILE["repeat"])
    assert main(["check", str(folder)]) == 3
    out = capsys.readouterr().out
    assert "The chat template of hostile-tiny (in chat_template.jinja) is refused: it builds" in out
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfr %}")
    assert main(["check", str(folder)]) == 3
    assert ("The chat template of hostile-tiny (in chat_template.jinja) has a mistake on line 1"
            in capsys.readouterr().out)


def test_a_reply_with_a_hostile_template_fails_in_a_sentence(tmp_path):
    from app.engine.events import DoneEvent, GenerationRequest
    from app.engine.session import Session

    folder = _tiny(tmp_path, HOSTILE["repeat"])
    session = Session()
    try:
        session.load_target(str(folder))
        done = [e for e in session.generate(GenerationRequest(prompt="hi", chat=True,
                                                              max_tokens=2))
                if isinstance(e, DoneEvent)][-1]
        assert done.finish_reason == "error"
        assert done.error.startswith(
            "The chat template of hostile-tiny (in chat_template.jinja) is refused: it builds")
    finally:
        session.unload()
