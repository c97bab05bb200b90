"""GGUF import: real files written with gguf's GGUFWriter, real MLX forward passes.

The reference for every import is a float32 mlx-lm model built from the source tensors after
gguf's own quantize -> dequantize round trip (K-quants: gguf's dequantization of the written
blocks). The float32 import must give the same logits to within 1e-4 (they come out
identical: the same float32 weights in the same model); the 4-bit (Metal) form of Q4_0/Q4_1/
Q4_K/Q8_0 files is within 2% of the reference logits' largest magnitude (float16 rounding only).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.builders import CORPUS, make_checkpoint
from tests.gguf_files import model_logits, reference_logits, write_gguf

IDS = [5, 17, 42, 99, 150, 7, 300, 12, 64, 201]
FLOAT_TOL = 1e-4
ALL_LEGACY = {  # every quant type gguf can write, plus a K-quant from random valid blocks
    "token_embd": "F16", "attn_q": "Q8_0", "attn_k": "Q4_0", "attn_v": "Q5_1",
    "attn_output": "Q4_1", "ffn_gate": "Q4_0", "ffn_up": "Q5_0", "ffn_down": "Q4_K",
    "output": "Q8_0",
}  # fmt: skip
CASES = {
    "llama": ALL_LEGACY,
    "qwen2": {"ffn_down": "Q6_K", "attn_q": "Q8_0"},
    "qwen3": {"attn_q": "Q8_0", "ffn_down": "Q5_K", "token_embd": "F16", "attn_v": "IQ4_NL"},
    "qwen3moe": {"ffn_gate_exps": "Q8_0", "ffn_up_exps": "Q4_0", "ffn_down_exps": "F16"},
    "gemma2": {"attn_v": "Q8_0", "ffn_down": "Q2_K"},
    "gemma3": {"ffn_up": "Q4_0", "attn_q": "Q8_0"},
    "phi3": {"attn_qkv": "Q8_0", "ffn_up": "Q4_1", "ffn_down": "Q3_K"},
}


@pytest.fixture
def store(tmp_path, monkeypatch):
    from app.checkpoints.store import Store

    monkeypatch.setenv("DRAFTPAIR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in ("OLLAMA_MODELS", "LLAMA_CACHE", "DRAFTPAIR_LMSTUDIO_MODELS", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DRAFTPAIR_NO_BLAS_FIX", "1")
    return Store(data_dir=tmp_path / "data")


def _load(path: Path):
    from mlx_lm.utils import load_model

    model, _ = load_model(Path(path))
    return model


@pytest.mark.parametrize("arch", sorted(CASES))
def test_import_matches_source_float_model(arch, tmp_path, store):
    from app.checkpoints.gguf_import import converted_from, import_gguf

    files, config, ref = write_gguf(tmp_path / f"tiny-{arch}.gguf", arch=arch, qtypes=CASES[arch])
    entry = import_gguf(files[0], store=store, precision="float32")
    assert entry.path.parent == store.models_dir and entry.kind == "chat"
    got = model_logits(_load(entry.path), IDS)
    want = reference_logits(config, ref, IDS)
    assert got.shape == want.shape == (len(IDS), config["vocab_size"])
    assert np.abs(got - want).max() <= FLOAT_TOL
    rec = converted_from(entry.path)
    assert rec["source_files"] == [str(files[0].resolve())]
    assert rec["gguf_architecture"] == arch and rec["precision"] == "float32"
    want_types = set(CASES[arch].values()) | {"F32"}
    assert set(rec["gguf_tensor_types"]) == want_types
    assert not any(p.suffix == ".gguf" for p in entry.path.iterdir())  # never copied


def test_tokenizer_rebuilt_from_metadata(tmp_path, store):
    from tokenizers import Tokenizer

    from app.checkpoints.gguf_import import import_gguf
    from tests.gguf_files import tokenizer_metadata

    files, _, _ = write_gguf(tmp_path / "tok.gguf")
    entry = import_gguf(files[0], store=store, precision="float32")
    source = tokenizer_metadata()[3]
    rebuilt = Tokenizer.from_file(str(entry.path / "tokenizer.json"))
    for text in CORPUS[:10] + ["<|im_start|>user\nHi 123<|im_end|>\n"]:
        assert rebuilt.encode(text).ids == source.encode(text).ids
        assert rebuilt.decode(rebuilt.encode(text).ids, skip_special_tokens=False) == text
    cfg = json.loads((entry.path / "tokenizer_config.json").read_text())
    assert (
        cfg["eos_token"] == "<|im_end|>" and "{% for message in messages %}" in cfg["chat_template"]
    )
    from mlx_lm.utils import load_tokenizer

    tok = load_tokenizer(entry.path)
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    assert tok.decode(ids) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_split_set_and_sharded_output(tmp_path, store, monkeypatch):
    from app.checkpoints import gguf_import
    from app.checkpoints.gguf_header import GGUFHeaderError, split_files

    files, config, ref = write_gguf(tmp_path / "split.gguf", split_max_tensors=6, qtypes=ALL_LEGACY)
    assert len(files) >= 3 and files[0].name == f"split-00001-of-{len(files):05d}.gguf"
    assert split_files(files[1]) == files  # any part names the set
    monkeypatch.setattr(gguf_import, "SHARD_BYTES", 200_000)  # several output shards too
    entry = gguf_import.import_gguf(files[1], store=store, precision="float32")
    assert entry.name == "split"
    index = json.loads((entry.path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    got = model_logits(_load(entry.path), IDS)
    assert np.abs(got - reference_logits(config, ref, IDS)).max() <= FLOAT_TOL
    with pytest.raises(gguf_import.GGUFImportError, match="already imported as split"):
        gguf_import.import_gguf(files[0], store=store, name="again")
    files[-1].unlink()
    with pytest.raises(GGUFHeaderError, match="part"):
        split_files(files[0])


def test_base_model_without_chat_template(tmp_path, store, capsys):
    from app.cli import main

    files, _, _ = write_gguf(tmp_path / "base.gguf", chat_template=None)
    assert main(["models", "import", str(files[0]), "--precision", "float32"]) == 0
    said = capsys.readouterr()
    out = said.out
    assert "base model" in out and "plain completion" in out
    # said before the conversion: how big the copy will be and in which precision
    assert said.err.splitlines()[0].startswith("Importing base.gguf (")
    assert "MLX copy in float32" in said.err.splitlines()[0]
    from app.checkpoints.gguf_import import converted_from

    entry = store.get("base")
    assert entry is not None and not entry.has_chat_template
    assert entry.kind == "base"  # a target to chat with as plain text, and a draft where it pairs
    assert converted_from(entry.path)["base_model"] is True
    cfg = json.loads((entry.path / "tokenizer_config.json").read_text())
    assert "chat_template" not in cfg
    from app.engine.models import load_model
    from app.engine.session import Session

    session = Session()
    session.target = load_model(entry.path)
    from app.engine.events import GenerationRequest

    ids = session.encode(GenerationRequest(messages=({"role": "user", "content": "Hello"},)))
    assert ids == list(session.target.tokenizer.encode("Hello"))  # turns as plain text


def test_four_bit_import(tmp_path, store):
    """Metal form: Q4_0/Q4_1/Q4_K/Q8_0 blocks carried over as MLX groups of 32 without rounding,
    other types re-quantized with at least the file's bits."""
    from app.checkpoints.gguf_import import import_gguf

    exact = {"token_embd": "Q8_0", "attn_q": "Q8_0", "attn_k": "Q4_0", "attn_v": "Q4_1",
             "attn_output": "Q4_1", "ffn_gate": "Q4_0", "ffn_up": "Q8_0", "ffn_down": "Q4_K",
             "output": "Q8_0"}  # fmt: skip
    files, config, ref = write_gguf(tmp_path / "q.gguf", qtypes=exact)
    entry = import_gguf(files[0], store=store, precision="4bit")
    q = json.loads((entry.path / "config.json").read_text())["quantization"]
    assert q["bits"] == 4 and q["group_size"] == 32
    assert q["model.layers.0.self_attn.q_proj"]["bits"] == 8  # Q8_0 in the file: 8 bits kept
    assert "model.layers.0.self_attn.k_proj" not in q  # Q4_0: 4 bits
    model = _load(entry.path)
    assert type(model.model.layers[0].self_attn.k_proj).__name__ == "QuantizedLinear"
    got = model_logits(model, IDS)
    want = reference_logits(config, ref, IDS)
    # only float16 rounding (scales, norms, activations) separates the two
    assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()
    assert entry.info.quantization == "4-bit affine (group 32)"

    files, _, _ = write_gguf(tmp_path / "mixed.gguf", qtypes=ALL_LEGACY)
    entry = import_gguf(files[0], store=store, precision="4bit")
    q = json.loads((entry.path / "config.json").read_text())["quantization"]
    assert q["model.layers.1.self_attn.v_proj"]["bits"] == 5  # Q5_1: 5 bits
    assert "model.layers.1.mlp.down_proj" not in q  # Q4_K: 4 bits
    assert model_logits(_load(entry.path), IDS).shape == (len(IDS), config["vocab_size"])


def test_cancel_leaves_nothing(tmp_path, store):
    from app.checkpoints.gguf_import import ImportCancelled, import_gguf

    files, _, _ = write_gguf(tmp_path / "c.gguf")
    cancel = threading.Event()
    seen = []

    def progress(p):
        seen.append(p)
        if p.done >= 3:
            cancel.set()

    with pytest.raises(ImportCancelled):
        import_gguf(files[0], store=store, progress=progress, cancel=cancel)
    # first what the copy will be (size, precision), then the steps
    assert seen[0].plan and "MLX copy in" in seen[0].message
    assert seen[1].message.startswith("Reading c.gguf") and seen[-1].done == 3
    assert 0 < seen[-1].fraction < 1
    assert not store.models_dir.exists() or not list(store.models_dir.iterdir())


def test_unsupported_and_damaged_files_are_plain_errors(tmp_path, store):
    import gguf

    from app.checkpoints.gguf_import import GGUFImportError, import_gguf

    w = gguf.GGUFWriter(tmp_path / "rwkv.gguf", "rwkv6")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFImportError, match="cannot convert rwkv6 GGUF models"):
        import_gguf(tmp_path / "rwkv.gguf", store=store)
    files, _, _ = write_gguf(tmp_path / "cut.gguf")
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2])
    with pytest.raises(GGUFImportError, match="cannot be read as GGUF"):
        import_gguf(files[0], store=store)
    (tmp_path / "not.gguf").write_text("hello")
    with pytest.raises(GGUFImportError, match="not a GGUF file"):
        import_gguf(tmp_path / "not.gguf", store=store)


def test_gguf_import_pairs_like_any_checkpoint(tmp_path, store):
    from app.checkpoints.gguf_import import import_gguf
    from app.checkpoints.inspect import inspect_checkpoint
    from app.checkpoints.memory_estimate import estimate_memory
    from app.checkpoints.pairing import VERDICT_FAILS, check
    from app.checkpoints.safetensors_header import summarize_weights

    files, _, ref = write_gguf(tmp_path / "pair.gguf", qtypes=ALL_LEGACY)
    target = import_gguf(files[0], store=store, precision="float32").path
    same_tok = make_checkpoint(tmp_path / "draft-same", hidden_size=32, num_layers=1,
                               num_heads=2, num_kv_heads=1, intermediate_size=64)  # fmt: skip
    other_tok = make_checkpoint(tmp_path / "draft-other", hidden_size=32, num_layers=1,
                                num_heads=2, num_kv_heads=1, intermediate_size=64,
                                tokenizer_kwargs={"permute_seed": 3})  # fmt: skip
    good = check(target, same_tok, kind="full-model")
    assert good.works, good.format_text()
    bad = check(target, other_tok, kind="full-model")
    assert bad.verdict == VERDICT_FAILS and any(c.startswith("tokenizer") for c in bad.codes())
    info = inspect_checkpoint(target)
    est = estimate_memory(info, context=512)
    summary = summarize_weights(target, info.config)
    assert est.target_weights == summary.weight_bytes > 0
    assert summary.param_count == sum(v.size for v in ref.values())  # the source's shapes


def test_llama3_rope_factors_become_rope_scaling(tmp_path, store):
    from app.checkpoints.gguf_import import import_gguf

    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}  # fmt: skip
    files, config, ref = write_gguf(
        tmp_path / "l3.gguf", config_overrides={"rope_scaling": rope, "rope_theta": 500000.0}
    )
    entry = import_gguf(files[0], store=store, precision="float32")
    cfg = json.loads((entry.path / "config.json").read_text())
    assert cfg["rope_scaling"] == rope
    ids = list(range(1, 300, 3))  # long enough for the low frequencies to matter
    got = model_logits(_load(entry.path), ids)
    assert np.abs(got - reference_logits(config, ref, ids)).max() <= FLOAT_TOL


def test_sentencepiece_tokenizer_from_metadata(tmp_path):
    """Llama 2 / Mistral style vocabularies (tokenizer.ggml.model = llama): BOS added by
    default, byte fallback for unknown characters, the chat template kept."""
    from mlx_lm.utils import load_tokenizer

    from app.checkpoints.gguf_tokenizer import build_tokenizer_files

    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    words = ["\u2581", "e", "t", "h", "l", "o", "\u2581t", "he", "\u2581the", "ll", "\u2581he",
             "llo", "\u2581hello", "a", "c", "\u2581c", "at", "\u2581cat"]  # fmt: skip
    tokens = pieces + words
    meta = {
        "general.architecture": "llama",
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * len(pieces) + [-float(i) for i in range(len(words))],
        "tokenizer.ggml.token_type": [2, 3, 3] + [6] * 256 + [1] * len(words),
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.chat_template": "{% for m in messages %}[INST] {{ m['content'] }} [/INST]"
        "{% endfor %}",
    }
    assert build_tokenizer_files(meta, tmp_path, context_length=512) is True
    tok = load_tokenizer(tmp_path)
    ids = tok.encode("hello the cat!")
    assert [tokens[i] for i in ids] == ["<s>", "\u2581hello", "\u2581the", "\u2581cat", "<0x21>"]
    assert tok.decode(ids, skip_special_tokens=True) == "hello the cat!"
    assert tok.eos_token == "</s>" and tok.chat_template.startswith("{% for m in messages %}")


def test_phi3_long_rope_factors_become_rope_scaling(tmp_path, store):
    from app.checkpoints.gguf_import import import_gguf

    half = 8  # head_dim 16 / 2
    rope = {"type": "longrope", "long_factor": [1.0 + 0.5 * i for i in range(half)],
            "short_factor": [1.0 + 0.1 * i for i in range(half)]}  # fmt: skip
    files, config, ref = write_gguf(tmp_path / "phi.gguf", arch="phi3", config_overrides={
        "rope_scaling": rope, "max_position_embeddings": 4096,
        "original_max_position_embeddings": 512})  # fmt: skip
    entry = import_gguf(files[0], store=store, precision="float32")
    cfg = json.loads((entry.path / "config.json").read_text())
    assert cfg["rope_scaling"]["type"] == "longrope"
    assert cfg["rope_scaling"]["long_factor"] == rope["long_factor"]
    assert cfg["original_max_position_embeddings"] == 512
    ids = list(range(1, 300, 3))
    got = model_logits(_load(entry.path), ids)
    assert np.abs(got - reference_logits(config, ref, ids)).max() <= FLOAT_TOL
