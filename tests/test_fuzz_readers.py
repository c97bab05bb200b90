"""Fuzzing (hypothesis) of the readers that see untrusted files: config.json, the tokenizer
files and safetensors headers. The readers' own catch-alls are bypassed (``_inspect``, not
``inspect_checkpoint``), so any exception they would hide fails here. Example counts are
bounded to keep the suite fast."""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.checkpoints import inspect as I
from app.checkpoints.safetensors_header import HeaderError, read_header, summarize_weights
from app.checkpoints.tokenizer_files import read_tokenizer

# DRAFTPAIR_FUZZ_EXAMPLES=1000 for a deeper, randomized search (the suite uses a fixed 60)
_DEEP = int(os.environ.get("DRAFTPAIR_FUZZ_EXAMPLES", "0"))
FAST = settings(max_examples=_DEEP or 60, deadline=None, derandomize=not _DEEP,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=4)
                      | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=12)
CONFIG_KEYS = ("model_type", "architectures", "hidden_size", "num_hidden_layers", "vocab_size",
               "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
               "quantization", "quantization_config", "text_config", "layer_types",
               "sliding_window", "rope_scaling", "tie_word_embeddings", "torch_dtype",
               "eos_token_id", "max_position_embeddings", "auto_map", "model_file",
               "dflash_config", "block_size", "target_layer_ids", "num_nextn_predict_layers",
               "mtp_num_hidden_layers", "full_attention_interval", "sliding_window_pattern")
known = st.sampled_from(["llama", "qwen3", "qwen3_5", "mamba", "gemma3_text", "deepseek_v3",
                         "dflash", "nosuch"]) | values
configs = st.fixed_dictionaries({}, optional={k: (known if k == "model_type" else values)
                                              for k in CONFIG_KEYS})


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    from tests.builders import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("fuzz") / "tiny", seed=5)


def _folder(template: Path) -> Path:
    dest = Path(tempfile.mkdtemp(prefix="draftpair-fuzz-")) / "m"
    shutil.copytree(template, dest)
    return dest


@FAST
@given(config=configs)
def test_config_values(template, config):
    folder = _folder(template)
    try:
        (folder / "config.json").write_text(json.dumps(config, allow_nan=True))
        info = I._inspect(folder, True)
        if info.config is not None:
            from app.checkpoints.rewind_rules import config_problem

            config_problem(info.config)
            from app.checkpoints.memory_estimate import estimate_memory

            estimate_memory(info, None, context=128, draft_kind="none")
        from app.checkpoints.pairing.load_check import load_check

        for f in load_check(folder, tokenizer="files"):
            assert f.message and "Traceback" not in f.message
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)


@FAST
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_config_bytes(template, raw):
    folder = _folder(template)
    try:
        (folder / "config.json").write_bytes(raw)
        info = I._inspect(folder, False)
        assert info.config is None or isinstance(info.config, dict)
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)


def _tokenizer_variant(base: dict, data) -> dict:
    tok = json.loads(json.dumps(base))
    for path in data.draw(st.lists(st.sampled_from([
        ("model",), ("model", "vocab"), ("model", "type"), ("model", "merges"),
        ("added_tokens",), ("normalizer",), ("pre_tokenizer",), ("post_processor",),
        ("decoder",)]), max_size=3)):
        node = tok
        for k in path[:-1]:
            node = node.setdefault(k, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node[path[-1]] = data.draw(values)
    return tok


@FAST
@given(data=st.data())
def test_tokenizer_files(template, data):
    folder = _folder(template)
    try:
        base = json.loads((folder / "tokenizer.json").read_text())
        which = data.draw(st.sampled_from(["tokenizer.json", "tokenizer_config.json",
                                           "tokenizer.model", "vocab.json", "raw"]))
        if which == "tokenizer.json":
            (folder / which).write_text(json.dumps(_tokenizer_variant(base, data)))
        elif which == "raw":
            name = data.draw(st.sampled_from(["tokenizer.json", "tokenizer_config.json"]))
            (folder / name).write_bytes(data.draw(st.binary(max_size=300)))
        elif which == "tokenizer.model":
            (folder / "tokenizer.json").unlink()
            (folder / which).write_bytes(data.draw(st.binary(max_size=300)))
        else:
            (folder / which).write_text(json.dumps(data.draw(values)))
        info = read_tokenizer(folder)
        if info is not None:
            assert all(isinstance(p, str) for p in info.problems)
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)


entries = st.dictionaries(
    st.text(max_size=10),
    st.fixed_dictionaries({}, optional={"dtype": st.sampled_from(["F32", "BF16", "U32", "X"])
                                        | values, "shape": values, "data_offsets": values}),
    max_size=4)


@FAST
@given(header=entries | values, pad=st.integers(0, 64), lie=st.integers(-8, 8))
def test_safetensors_headers(header, pad, lie):
    folder = Path(tempfile.mkdtemp(prefix="draftpair-fuzz-"))
    try:
        raw = json.dumps(header, allow_nan=True).encode()
        f = folder / "model.safetensors"
        f.write_bytes(struct.pack("<Q", max(len(raw) + lie, 0)) + raw + b"\0" * pad)

        def read() -> None:
            try:
                h = read_header(f)
                assert all(t.nbytes >= 0 for t in h.tensors.values())
            except HeaderError as exc:
                assert str(exc).startswith("model.safetensors")
                _plain_sentence(str(exc))
            summarize_weights(folder,
                              {"quantization": header} if isinstance(header, dict) else None)

        assert _peak_mb(read) < 32
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@FAST
@given(raw=st.binary(max_size=64))
def test_safetensors_raw_bytes(raw):
    folder = Path(tempfile.mkdtemp(prefix="draftpair-fuzz-"))
    try:
        (folder / "model.safetensors").write_bytes(raw)
        with pytest.raises(HeaderError):
            read_header(folder / "model.safetensors")
        assert summarize_weights(folder).errors
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- hostile files: GGUF headers, settings ranges, chat templates (bounded time and memory) ----

PYTHON_WORDS = ("Error", "Exception", "Traceback", "(ValueError)", "(IndexError)", "NoneType",
                "__")


def _plain_sentence(text: str) -> None:
    assert text and "\n" not in text and text.rstrip().endswith((".", ")")), text
    assert not any(w in text for w in PYTHON_WORDS), text


def _peak_mb(fn) -> float:
    """Runs ``fn``; the peak of Python allocations during it, in MB."""
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def _gguf_string(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


_GGUF_VALUE = st.one_of(
    st.tuples(st.just(4), st.integers(0, 2**32 - 1).map(lambda v: struct.pack("<I", v))),
    st.tuples(st.just(8), st.binary(max_size=12).map(_gguf_string)),
    st.tuples(st.just(8), st.tuples(st.integers(0, 2**64 - 1), st.binary(max_size=4)).map(
        lambda t: struct.pack("<Q", t[0]) + t[1])),  # a string that lies about its length
    st.tuples(st.just(9), st.tuples(st.sampled_from([0, 4, 8, 9, 12, 99]),
                                    st.integers(0, 2**64 - 1), st.binary(max_size=16)).map(
        lambda t: struct.pack("<IQ", t[0], t[1]) + t[2])),  # an array of any declared size
    st.tuples(st.integers(0, 20), st.binary(max_size=8)),  # any type, any payload
)
_GGUF_TENSOR = st.tuples(st.binary(max_size=8), st.integers(0, 9),
                         st.lists(st.integers(0, 2**64 - 1), max_size=4),
                         st.integers(0, 40), st.integers(0, 2**64 - 1))


@st.composite
def gguf_headers(draw) -> bytes:
    kvs = draw(st.lists(st.tuples(st.binary(max_size=10), _GGUF_VALUE), max_size=4))
    tensors = draw(st.lists(_GGUF_TENSOR, max_size=3))
    n_kv = draw(st.sampled_from([len(kvs), 2**40, 2**64 - 1]) | st.integers(0, 8))
    n_t = draw(st.sampled_from([len(tensors), 2**40]) | st.integers(0, 4))
    out = b"GGUF" + struct.pack("<IQQ", draw(st.sampled_from([3, 2, 1])), n_t, n_kv)
    for key, (vtype, payload) in kvs:
        out += _gguf_string(key) + struct.pack("<I", vtype) + payload
    for name, n_dims, dims, kind, offset in tensors:
        out += _gguf_string(name) + struct.pack("<I", n_dims)
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", kind, offset)
    return out + b"\0" * draw(st.integers(0, 64))


@FAST
@given(raw=gguf_headers() | st.binary(max_size=96).map(lambda b: b"GGUF" + b))
def test_gguf_headers(raw):
    from app.checkpoints.gguf_header import GGUFHeaderError, read_header

    folder = Path(tempfile.mkdtemp(prefix="draftpair-fuzz-"))
    try:
        path = folder / "m.gguf"
        path.write_bytes(raw)

        def read() -> None:
            try:
                head = read_header(path, tensors=True)
                assert all(n <= len(raw) for n in head.array_lengths.values())
            except GGUFHeaderError as exc:
                _plain_sentence(str(exc))
                assert "m.gguf" in str(exc)

        assert _peak_mb(read) < 32
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@FAST
@given(config=configs)
def test_settings_ranges(config):
    from app.checkpoints.config_ranges import config_range_problem

    problem = config_range_problem(config)
    if problem is not None:
        _plain_sentence(problem)
        assert problem.startswith("config.json says ")


_PIECES = st.sampled_from([
    "{{ 'x' * N }}", "{{ 'x'|center(N) }}", "{{ '%*d' % (N, 1) }}", "{{ '{:>N}'.format(1) }}",
    "{% for i in range(N) %}{{ i }}{% endfor %}", "{% for i in range(N) %}{% endfor %}",
    "{% set ns = namespace(s='ab') %}{% for i in range(N) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s|length }}", "{{ ([1] * N)|join(',') }}", "{{ messages|tojson }}",
    "{{ (messages * N)|tojson(indent=2) }}", "{{ 'ab'.replace('', 'cd' * N) }}",
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content|trim }}{% endfor %}",
    "{{ N ** N }}", "{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}"
    "{{ f(N % 30) }}", "{{ raise_exception('no') }}", "{{ ''.__class__ }}", "{% if %}",
    "{{ bos_token }}", "{% if add_generation_prompt %}<|assistant|>{% endif %}",
    "{{ messages[N] }}", "{{ (('x' * N) ~ 'y')|length }}", "{% set s %}{{ 'z' * N }}{% endset %}",
])


@FAST
@given(pieces=st.lists(st.tuples(_PIECES, st.integers(0, 10**12)), min_size=1, max_size=4),
       contents=st.lists(st.text(max_size=40), min_size=1, max_size=3))
def test_chat_template_renderer(pieces, contents):
    from app.checkpoints.chat_template import Limits, render_chat
    from app.errors import DraftPairError

    template = "".join(p.replace("N", str(n)) for p, n in pieces)
    messages = [{"role": "user", "content": c} for c in contents]
    limits = Limits(chars=200_000, steps=50_000, seconds=20.0)
    cap = limits.chars + limits.per_input_char * (sum(len(c) + 80 for c in contents) + 200)

    def render() -> None:
        try:
            text = render_chat(template, messages, model="m", limits=limits,
                               variables={"bos_token": "<s>"})
            assert len(text) <= cap
        except DraftPairError as exc:
            _plain_sentence(str(exc).replace("__class__", "class"))  # the template's own words

    assert _peak_mb(render) < 200
