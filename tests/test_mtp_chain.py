"""The chained-step training pass of an MTP head computes what the decode loop computes when
it chains: for every position, the same logits as pairing the real states into a KV cache
and then stepping on the head's own output state (random weights, a tiny llama target)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from app.demo.mtp_chain import chain_mask, two_step
from app.engine.drafters.mtp_head import POSTNORM, PRENORM, BoundHead, MTPHead, inner_model


@pytest.fixture(scope="module")
def target(tiny_models):
    from mlx_lm import load

    model, _ = load(str(tiny_models.target))
    return model


def _random_head(target, setting: str, seed: int) -> MTPHead:
    from app.demo.mtp_train import init_demo_module

    module = init_demo_module(target)
    from mlx.utils import tree_flatten, tree_unflatten

    key = mx.random.key(seed)
    params = []
    for name, p in tree_flatten(module.parameters()):
        key, sub = mx.random.split(key)
        params.append((name, p + 0.2 * mx.random.normal(p.shape, key=sub)))
    module.update(tree_unflatten(params))
    mx.eval(module.parameters())
    return MTPHead(module=module, hidden_state=setting, source="test", layout="demo")


def test_chain_mask_rows():
    m = np.array(chain_mask(3))
    assert m.tolist() == [[True, False, False, True, False, False],
                          [True, True, False, False, True, False],
                          [True, True, True, False, False, True]]


@pytest.mark.parametrize("setting", [POSTNORM, PRENORM])
def test_two_step_equals_the_decode_loop(target, setting):
    from mlx_lm.models.cache import KVCache

    head = _random_head(target, setting, seed=3)
    bound = BoundHead(head, target)
    H = head.module.fc.weight.shape[0]
    L = 7
    tokens = mx.array(np.random.default_rng(0).integers(3, 200, size=L + 2), dtype=mx.uint32)
    hidden = mx.random.normal((L, H), key=mx.random.key(1))
    emb = inner_model(target).embed_tokens
    post1, post2 = two_step(head.module, emb(tokens[1 : L + 1])[None], hidden[None],
                            emb(tokens[2 : L + 2])[None], head.chain_state)
    got1, got2 = bound.logits(post1[0]), bound.logits(post2[0])

    for i in range(L):
        cache = [KVCache()]
        logits, state = bound.step(tokens[1 : i + 2], hidden[: i + 1], cache)
        want2, _ = bound.step(tokens[i + 2 : i + 3], state[-1:], cache)
        assert np.allclose(np.array(logits[-1]), np.array(got1[i]), atol=1e-3), i
        assert np.allclose(np.array(want2[0]), np.array(got2[i]), atol=1e-3), i
    # and the chained step is not the first step again: the check above can tell them apart
    assert not np.allclose(np.array(got1), np.array(got2), atol=1e-2)
