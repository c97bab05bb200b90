"""The pairing matrix: real tokenizer files and safetensors headers, each case a clear verdict."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from app.checkpoints.memory_estimate import Budget
from app.checkpoints.pairing import (
    VERDICT_FAILS,
    VERDICT_WARNINGS,
    VERDICT_WORKS,
    check,
    suggest_drafts,
)
from tests.test_checkpoints_builders import make_header_checkpoint, standard_checkpoints


@pytest.fixture(scope="session")
def ckpts(tmp_path_factory):
    return standard_checkpoints(tmp_path_factory.mktemp("ckpts"))


BIG_BUDGET = Budget(64 * 1024**3, "test budget", 64 * 1024**3)


def run(target, draft=None, **kw):
    kw.setdefault("budget", BIG_BUDGET)
    report = check(target, draft, **kw)
    json.dumps(report.to_dict())  # always serializable
    assert report.format_text()
    for f in report.findings:
        assert f.message.endswith((".", ")")) and "Traceback" not in f.message
    return report


def test_identical_tokenizers_work(ckpts):
    r = run(ckpts.target, ckpts.draft)
    assert r.verdict == VERDICT_WORKS, r.format_text()
    assert r.kind == "full-model"
    assert "tokenizer.mapping_equal" in r.codes()
    assert r.memory is not None and r.memory.draft_weights > 0 and r.memory.target_kv > 0


def test_permuted_ids_with_equal_size_will_not_work(ckpts):
    t = json.loads((ckpts.target / "config.json").read_text())
    d = json.loads((ckpts.permuted / "config.json").read_text())
    assert t["vocab_size"] == d["vocab_size"]  # the trap: sizes agree
    r = run(ckpts.target, ckpts.permuted)
    assert r.verdict == VERDICT_FAILS
    (f,) = [f for f in r.blockers if f.code == "tokenizer.mapping_mismatch"]
    assert "number their tokens differently" in f.message
    assert "map to different text" in f.detail


def test_target_with_extra_added_tokens_works(ckpts):
    r = run(ckpts.target_extra, ckpts.draft)
    assert r.verdict == VERDICT_WORKS, r.format_text()
    assert "tokenizer.target_extra_tokens" in r.codes()


def test_draft_with_extra_added_tokens_is_larger(ckpts):
    r = run(ckpts.target, ckpts.draft_extra)
    assert r.verdict == VERDICT_FAILS
    assert "vocab.draft_larger" in r.codes()


def test_different_eos_is_a_warning(ckpts):
    r = run(ckpts.target, ckpts.other_eos)
    assert r.verdict == VERDICT_WARNINGS, r.format_text()
    assert [f.code for f in r.warnings] == ["tokenizer.eos_differs"]


def test_draft_vocab_larger_will_not_work(ckpts):
    r = run(ckpts.target, ckpts.draft_big_vocab)
    assert r.verdict == VERDICT_FAILS
    (f,) = [f for f in r.blockers if f.code == "vocab.draft_larger"]
    assert "400" in f.detail and "320" in f.detail


def test_missing_vocab_size_uses_embedding_rows(ckpts):
    r = run(ckpts.target, ckpts.no_vocab)
    assert r.verdict == VERDICT_WARNINGS, r.format_text()
    (f,) = [f for f in r.warnings if f.code == "vocab.draft_undeclared"]
    assert "320" in f.detail


def test_padded_target_embeddings_are_fine(ckpts):
    r = run(ckpts.padded_target, ckpts.draft)
    assert r.verdict == VERDICT_WORKS, r.format_text()
    assert "vocab.target_padded" in r.codes()


@pytest.mark.parametrize("name", ["dflash", "dflash_new"])
def test_dflash_drafter_is_recognised(ckpts, name):
    folder = getattr(ckpts, name)
    r = run(ckpts.target, folder)
    assert r.kind == "dflash"
    assert "dflash.detected" in r.codes()
    assert (
        not {"dflash.layers_mismatch", "dflash.hidden_mismatch", "dflash.config_incomplete"}
        & r.codes()
    )
    if r.verdict == VERDICT_FAILS:  # only acceptable reason: this build has no DFlash runtime
        assert {f.code for f in r.blockers} == {"kind.runtime_missing"}
    as_full = run(ckpts.target, folder, kind="full-model")
    assert as_full.verdict == VERDICT_FAILS
    assert "draft.is_dflash" in as_full.codes()
    as_target = run(folder)
    assert "target.is_dflash" in {f.code for f in as_target.blockers}


def test_dflash_for_another_target(ckpts):
    r = run(ckpts.target, ckpts.dflash_wrong)
    assert "dflash.layers_mismatch" in {f.code for f in r.blockers}
    assert "different" in r.blockers[0].message or any("different" in f.message for f in r.blockers)


def test_recurrent_target_and_draft_now_pair(ckpts):
    # recurrent state is rewound exactly by the engine, as a target and as a draft
    r = run(ckpts.mamba, kind="prompt-lookup")
    assert "cache.not_trimmable" not in r.codes() and r.verdict != VERDICT_FAILS
    r2 = run(ckpts.target, ckpts.mamba)
    assert "cache.draft_not_trimmable" not in r2.codes()


def test_sliding_window_only_target(ckpts):
    # sliding windows are rewound exactly however long the conversation
    r = run(ckpts.sliding, kind="prompt-lookup", context=1024)
    assert not {"cache.sliding_window", "cache.not_trimmable"} & r.codes()
    assert r.verdict == VERDICT_WORKS


def test_unrewindable_cache_blocks_like_the_session(ckpts, tmp_path):
    from mlx_lm.models.cache import KVCache
    from mlx_lm.models.deepseek_v41 import LayerCache

    from app.engine.rollback import problem

    cfg = {
        "model_type": "deepseek_v41", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 320,
    }  # fmt: skip
    folder = make_header_checkpoint(
        tmp_path / "dsv41",
        cfg,
        {"model.embed_tokens.weight": ("F32", (320, 64))},
        tokenizer_from=ckpts.target,
    )
    r = run(folder, ckpts.draft)
    (f,) = [f for f in r.blockers if f.code == "cache.not_trimmable"]
    # the same sentence the session gives for the cache mlx-lm builds for this family
    assert f.detail == problem([LayerCache(8), KVCache()])
    assert "LayerCache" in f.detail


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        ("truncated", "draft.weights_corrupt", "interrupted download"),
        ("bad_header", "draft.weights_corrupt", "damaged"),
        ("garbled_config", "draft.config_invalid", "damaged"),
        ("garbled_tokenizer", "draft.tokenizer_invalid", "damaged"),
    ],
)
def test_broken_files_give_clear_blockers(ckpts, name, code, words):
    r = run(ckpts.target, getattr(ckpts, name))
    assert r.verdict == VERDICT_FAILS
    f = next(f for f in r.blockers if f.code == code)
    assert words in f.message
    if name == "garbled_config":
        assert "not valid JSON" in f.detail
    if name == "truncated":
        assert "truncated" in f.detail


def test_broken_target_and_missing_folders(ckpts, tmp_path):
    r = run(ckpts.garbled_config)
    assert "target.config_invalid" in r.codes()
    r = run(tmp_path / "nope", tmp_path / "nope2")
    assert {"target.missing", "draft.missing"} <= r.codes()
    pickles = tmp_path / "pickles"
    shutil.copytree(ckpts.draft, pickles)
    (pickles / "model.safetensors").unlink()
    (pickles / "model.safetensors.index.json").unlink(missing_ok=True)
    (pickles / "pytorch_model.bin").write_bytes(b"\x80\x04not loaded")
    r = run(ckpts.target, pickles)
    assert "draft.pickle_only" in {f.code for f in r.blockers}


def test_unsupported_architecture(ckpts, tmp_path):
    folder = tmp_path / "alien"
    shutil.copytree(ckpts.draft, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "alien_arch_9000"
    (folder / "config.json").write_text(json.dumps(cfg))
    r = run(folder)
    assert "target.arch_unsupported" in {f.code for f in r.blockers}


def test_mtp(ckpts):
    r = run(ckpts.mtp_target, kind="mtp")
    assert "mtp.weights_present" in r.codes()
    assert not any(f.code == "mtp.no_weights" for f in r.findings)
    r = run(ckpts.target, kind="mtp")
    assert "mtp.no_weights" in {f.code for f in r.blockers}
    r = run(ckpts.target, ckpts.draft, kind="mtp")
    assert "kind.no_draft_model" in r.codes()


def test_reduced_draft_head(ckpts, tmp_path):
    r = run(ckpts.target, ckpts.head_draft)
    assert r.verdict == VERDICT_WORKS, r.format_text()
    assert "vocab.reduced_head" in r.codes()
    bad = tmp_path / "bad_head"
    shutil.copytree(ckpts.head_draft, bad)
    (bad / "draft_head.json").write_text(json.dumps({"format": 1, "token_ids": [1, 2, 999]}))
    r = run(ckpts.target, bad)
    assert "vocab.draft_ids_out_of_range" in {f.code for f in r.blockers}


def test_memory_over_budget_shows_figures(ckpts):
    r = check(ckpts.target, ckpts.draft, budget=Budget(1000, "a tiny test budget"))
    (f,) = [f for f in r.blockers if f.code == "memory.over_budget"]
    assert (
        "target weights" in f.detail
        and "draft KV cache" in f.detail
        and "a tiny test budget" in f.detail
    )
    assert r.memory.total > 1000


def test_check_is_fast_on_big_vocab_and_huge_files(ckpts, tmp_path):
    """Two 152k-token tokenizers and multi-GB (sparse) weights: well under a second."""
    n = 151_936
    vocab = {f"tok{i}": i for i in range(n - 3)}
    added = [
        {"id": n - 3 + j, "content": s, "special": True}
        for j, s in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    ]
    tok = {"model": {"type": "BPE", "vocab": vocab, "merges": []}, "added_tokens": added, "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel"}}  # fmt: skip
    tok_cfg = {"eos_token": "<|im_end|>", "chat_template": "{{ messages }}"}
    folders = []
    for name, hidden, layers in (("big_t", 4096, 36), ("big_d", 1024, 28)):
        cfg = {
            "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": hidden,
            "num_hidden_layers": layers, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "intermediate_size": 3 * hidden, "vocab_size": n, "max_position_embeddings": 40960,
            "torch_dtype": "bfloat16",
        }  # fmt: skip
        tensors = {
            "model.embed_tokens.weight": ("BF16", (n, hidden)),
            "lm_head.weight": ("BF16", (n, hidden)),
        }
        for i in range(layers):
            tensors[f"model.layers.{i}.mlp.up_proj.weight"] = ("BF16", (3 * hidden, hidden))
        f = make_header_checkpoint(tmp_path / name, cfg, tensors, sparse=True)
        (f / "tokenizer.json").write_text(json.dumps(tok))
        (f / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
        folders.append(f)
    t = time.perf_counter()
    r = check(folders[0], folders[1], budget=BIG_BUDGET)
    elapsed = time.perf_counter() - t
    assert elapsed < 1.0, elapsed
    assert r.verdict == VERDICT_WORKS, r.format_text()
    assert r.memory.target_weights > 2 * 1024**3


def test_suggest_drafts_ranks_and_explains(ckpts, tmp_path, monkeypatch):
    from app.checkpoints.store import Store

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    store = Store(data_dir=tmp_path / "data")
    for name in (
        "target",
        "draft",
        "other_eos",
        "permuted",
        "truncated",
        "dflash",
        "mamba",
        "head_draft",
    ):
        store.import_folder(getattr(ckpts, name), name=name)
    s = suggest_drafts(ckpts.target, store=store, budget=BIG_BUDGET)
    ranked = [x.name for x in s.ranked]
    excluded = {x.name: x.reason for x in s.excluded}
    assert "draft" in ranked and "other_eos" in ranked and "head_draft" in ranked
    assert ranked.index("draft") < ranked.index("other_eos")  # warnings rank lower
    assert excluded["target"] == "This is the target itself."
    assert "number their tokens differently" in excluded["permuted"]
    assert "truncated" in excluded["truncated"] or "damaged" in excluded["truncated"]
    assert "mamba" in ranked  # a recurrent draft rewinds exactly too
    for reason in excluded.values():
        assert reason.endswith(".") and "\n" not in reason
    dflash_ok = "dflash" in ranked
    assert dflash_ok or "DFlash" in excluded["dflash"]
    assert any(o.kind == "prompt-lookup" and o.report.works for o in s.no_model_options)


def _variant(src, dest, *, tok_json=None, tok_cfg=None, config=None):
    shutil.copytree(src, dest)
    for name, change in (
        ("tokenizer.json", tok_json),
        ("tokenizer_config.json", tok_cfg),
        ("config.json", config),
    ):
        if change:
            data = json.loads((dest / name).read_text())
            change(data)
            (dest / name).write_text(json.dumps(data))
    return dest


def test_tokenizer_details_are_compared(ckpts, tmp_path):
    pre = _variant(
        ckpts.draft,
        tmp_path / "pre",
        tok_json=lambda d: d.update(pre_tokenizer={"type": "Whitespace"}),
    )
    assert "tokenizer.pre_tokenizer_differs" in {f.code for f in run(ckpts.target, pre).warnings}
    norm = _variant(
        ckpts.draft, tmp_path / "norm", tok_json=lambda d: d.update(normalizer={"type": "NFKC"})
    )
    assert "tokenizer.normalizer_differs" in {f.code for f in run(ckpts.target, norm).warnings}
    bos = _variant(
        ckpts.draft,
        tmp_path / "bos",
        tok_cfg=lambda d: d.update(add_bos_token=True, bos_token="<|im_start|>"),
    )
    r = run(ckpts.target, bos)
    assert r.verdict == VERDICT_WARNINGS and "tokenizer.bos_differs" in r.codes()
    tmpl = _variant(
        ckpts.draft, tmp_path / "tmpl", tok_cfg=lambda d: d.update(chat_template="{{ x }}")
    )
    r = run(ckpts.target, tmpl)
    assert r.verdict == VERDICT_WORKS and "chat_template.draft_differs" in r.codes()
    no_tmpl = _variant(ckpts.target, tmp_path / "no_tmpl", tok_cfg=lambda d: d.pop("chat_template"))
    assert "chat_template.target_missing" in {
        f.code for f in run(no_tmpl, kind="prompt-lookup").warnings
    }


def test_unreadable_quantization_and_remote_code(ckpts, tmp_path):
    bnb = _variant(
        ckpts.draft,
        tmp_path / "bnb",
        config=lambda c: c.update(quantization_config={"quant_method": "bitsandbytes"}),
    )
    assert "target.quant_unreadable" in {f.code for f in run(bnb).blockers}
    code = _variant(
        ckpts.draft, tmp_path / "code", config=lambda c: c.update(model_file="modeling_x.py")
    )
    assert "target.remote_code" in {f.code for f in run(code).blockers}
    auto = _variant(
        ckpts.draft, tmp_path / "auto", config=lambda c: c.update(auto_map={"AutoModel": "x.Y"})
    )
    assert "target.remote_code_ignored" in run(auto).codes()


def _sentencepiece_folder(src, dest, corpus):
    import io

    sentencepiece = pytest.importorskip("sentencepiece")
    from tests.builders import CORPUS

    buf = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus or CORPUS),
        model_writer=buf,
        vocab_size=120,
        model_type="bpe",
        minloglevel=2,
    )
    shutil.copytree(src, dest)
    (dest / "tokenizer.json").unlink()
    (dest / "tokenizer.model").write_bytes(buf.getvalue())
    return dest


def test_sentencepiece_only_tokenizers(ckpts, tmp_path):
    from tests.builders import CORPUS

    t = _sentencepiece_folder(ckpts.target, tmp_path / "sp_t", None)
    d = _sentencepiece_folder(ckpts.draft, tmp_path / "sp_d", None)
    r = run(t, d)
    assert r.verdict == VERDICT_WORKS, r.format_text()
    assert "tokenizer.mapping_equal" in r.codes()
    other = _sentencepiece_folder(ckpts.draft, tmp_path / "sp_o", [c[::-1] for c in CORPUS])
    r = run(t, other)
    assert "tokenizer.mapping_mismatch" in {f.code for f in r.blockers}


def test_odd_values_never_raise(ckpts, tmp_path):
    odd = _variant(
        ckpts.draft,
        tmp_path / "odd",
        config=lambda c: c.update(
            num_hidden_layers="two", num_key_value_heads=[1], hidden_size={"x": 1}, layer_types=5
        ),
    )
    from app.checkpoints.pairing.load_check import with_load_check

    cases = (((odd,), {}, "target"), ((ckpts.target, odd), {}, "draft"),
             ((odd, ckpts.draft), {"kind": "full-model"}, "target"))
    for args, kw, odd_role in cases:
        r = run(*args, **kw)
        assert r.verdict in (VERDICT_FAILS, VERDICT_WARNINGS, VERDICT_WORKS)
        assert r.blockers or r.findings
        # the odd values were judged, not swallowed by the catch-all for a crashed check
        assert "check.failed" not in r.codes(), r.format_text()
        # what `draftpair check` runs adds the load check: the odd folder will not load
        full = with_load_check(r)
        assert "check.failed" not in full.codes()
        assert full.verdict == VERDICT_FAILS, full.format_text()
        # refused by name: the settings range check comes first and names the odd value
        blocker = {f.code: f for f in full.blockers}.get(f"{odd_role}.config_range")
        assert blocker is not None, full.format_text()
        assert any(key in blocker.message for key in ("num_hidden_layers", "num_key_value_heads",
                                                      "hidden_size", "layer_types"))
