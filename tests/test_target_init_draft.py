"""A draft started from the target's own layers (``demo train --from-target-layers``) ships
in mlx-lm's quantized format: the frozen embedding at 4 bits, the layers at 6. The engine
loads it, expands the layers to float32 on the CPU backend, slices a reduced head from the
quantized embedding, and speculation with it stays exact."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten

from app.demo import train as T
from app.engine.drafters.full_model import DraftHead
from app.engine.events import DoneEvent, GenerationRequest
from app.engine.models import _expand_small_quantized, load_model
from app.engine.session import Session
from tests.builders import make_trained_checkpoint

SHAPE = {"target_layers": [0], "embed_bits": 4, "embed_group": 64}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    from mlx_lm.utils import load_model as mlx_load_model

    root = tmp_path_factory.mktemp("target_init")
    target = make_trained_checkpoint(root / "target", seed=1, steps=150)
    tmodel, tcfg = mlx_load_model(target)
    config = T.draft_config(tcfg, T.DraftShape(target_layers=SHAPE["target_layers"]))
    draft = T.build_draft(config)
    T.copy_target_layers(draft, tmodel, SHAPE["target_layers"])
    trained = dict(tree_flatten(draft.parameters()))
    weights, config = T.ship_weights(trained, SHAPE, config, layer_bits=6)
    out = root / "draft"
    out.mkdir()
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (target / name).is_file():
            shutil.copy2(target / name, out / name)
    vocab = tcfg["vocab_size"]
    head = sorted(set(range(0, vocab, 2)) | {int(tcfg["eos_token_id"])})
    (out / "draft_head.json").write_text(json.dumps({"format": 1, "token_ids": head}))
    mx.save_safetensors(str(root / "trained.safetensors"), trained)
    return {"target": target, "draft": out, "trained": root / "trained.safetensors"}


def test_shipped_format(dirs):
    cfg = json.loads((dirs["draft"] / "config.json").read_text())
    q = cfg["quantization"]
    assert q["model.embed_tokens"] == {"group_size": 64, "bits": 4, "mode": "affine"}
    assert q["model.layers.0.mlp.down_proj"]["bits"] == 6
    w = mx.load(str(dirs["draft"] / "model.safetensors"))
    assert w["model.embed_tokens.weight"].dtype == mx.uint32
    assert w["model.layers.0.self_attn.q_proj.weight"].dtype == mx.uint32
    assert w["model.norm.weight"].dtype == mx.float16
    # plain mlx-lm reads it as a (partly) quantized model
    from mlx_lm import load

    model, _ = load(str(dirs["draft"]))
    assert isinstance(model.model.embed_tokens, nn.QuantizedEmbedding)
    assert isinstance(model.model.layers[0].mlp.down_proj, nn.QuantizedLinear)


def test_cpu_load_expands_layers_keeps_embedding_quantized(dirs):
    d = load_model(dirs["draft"], backend="cpu")
    mods = [m for _, m in d.model.named_modules()]
    assert not any(isinstance(m, nn.QuantizedLinear) for m in mods)
    assert isinstance(d.model.model.embed_tokens, nn.QuantizedEmbedding)
    assert d.precision == "float32 + 4-bit embedding"
    trained = mx.load(str(dirs["trained"]))
    name = "model.layers.0.mlp.up_proj.weight"
    got = dict(tree_flatten(d.model.parameters()))[name]
    assert got.dtype == mx.float32
    ref = trained[name]
    err = float(mx.abs(got - ref).max())
    assert 0 < err < 0.05 * float(mx.abs(ref).max())  # 6-bit rounding, not a different tensor

    kept = load_model(dirs["draft"], backend="gpu")  # Metal: layers stay quantized
    assert isinstance(kept.model.model.layers[0].mlp.up_proj, nn.QuantizedLinear)
    assert _expand_small_quantized(kept.model, limit=0) == 0  # too big: left alone


def test_reduced_head_dequantizes_its_rows(dirs):
    d = load_model(dirs["draft"], backend="cpu")
    head = DraftHead(d, target_vocab=d.vocab_size)
    assert head.reduced
    emb = d.model.model.embed_tokens
    full = mx.dequantize(emb.weight, emb.scales, emb.biases, group_size=64, bits=4)
    assert mx.allclose(head.weight, full[head.ids].astype(head.weight.dtype), atol=1e-6)


def _run(session: Session, **kw) -> DoneEvent:
    events = list(session.generate(GenerationRequest(chat=False, **kw)))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason != "error", done
    return done


def test_speculation_with_quantized_target_init_draft_is_exact(dirs):
    s = Session()
    s.load_target(dirs["target"])
    s.load_draft(dirs["draft"])
    proposed = 0
    for prompt in ("The cat sat on", "Once upon a time", "def add(a"):
        plain = _run(s, prompt=prompt, max_tokens=32)
        spec = _run(s, prompt=prompt, max_tokens=32, draft_kind="full-model", draft_width=3,
                    adaptive=False)
        assert spec.token_ids == plain.token_ids, prompt
        proposed += spec.timings.draft_n
    assert proposed > 0
