"""Rebuild a model's tokenizer files from a GGUF file's metadata.

Public API:
    build_tokenizer_files(meta, folder, *, context_length) -> bool
        writes tokenizer.json, tokenizer_config.json and special_tokens_map.json into
        ``folder``; returns True when the file carried a chat template (False: a base model).
        Raises GGUFTokenizerError (plain message) for a tokenizer it cannot rebuild.

A GGUF has no tokenizer.json: it stores the vocabulary, merges, token types and special ids
under llama.cpp's ``tokenizer.ggml.*`` keys. Byte-level BPE vocabularies (``model = gpt2``:
Llama 3, Qwen, SmolLM, Phi-4, ...) are rebuilt here, with the pre-tokenizer llama.cpp uses for
the file's ``tokenizer.ggml.pre``; SentencePiece-style vocabularies (``model = llama``: Llama 2,
Mistral, Gemma, Phi-3) go through transformers' own GGUF tokenizer builders.
"""

from __future__ import annotations

import json
from pathlib import Path

from app.errors import DraftPairError

CONTROL = 3  # llama.cpp token types
USER_DEFINED = 4


class GGUFTokenizerError(DraftPairError):
    pass


def _token(meta: dict, key: str) -> str | None:
    idx = meta.get(f"tokenizer.ggml.{key}")
    tokens = meta["tokenizer.ggml.tokens"]
    if isinstance(idx, int) and 0 <= idx < len(tokens):
        return tokens[idx]
    return None


def _split_regex(pre: str | None) -> str | None:
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            GGUF_PRE_TOKENIZER_SPLITS,
        )
    except ImportError:  # an older transformers: fall back to the GPT-2 split
        return None
    return GGUF_PRE_TOKENIZER_SPLITS.get(pre or "")


def _byte_level(meta: dict):
    """Byte-level BPE from the vocabulary and merges, split the way llama.cpp splits."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
    )

    tokens = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
    types = [int(t) for t in meta.get("tokenizer.ggml.token_type") or []]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.normalizer = None
    pre = meta.get("tokenizer.ggml.pre")
    split = _split_regex(pre)
    if pre == "smollm":  # llama.cpp: every digit alone, then the GPT-2 split
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
            ]
        )
    elif split is not None:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:  # "default", "gpt-2" and names without a table entry: the GPT-2 split
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(
            add_prefix_space=False, trim_offsets=True, use_regex=True
        )
    # the stub lists no arguments; the decoder takes them and writes them to tokenizer.json
    tok.decoder = decoders.ByteLevel(  # type: ignore[call-arg]
        add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = [tokens[i] for i, t in enumerate(types) if t == CONTROL]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    user = [tokens[i] for i, t in enumerate(types) if t == USER_DEFINED]
    if user:  # llama.cpp matches these whole (e.g. <think>), not as special tokens
        tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in user])
    return tok, specials, "GPT2Tokenizer"


def _via_transformers(meta: dict, architecture: str):
    """SentencePiece / Unigram vocabularies through transformers' GGUF builders."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            GGUF_TOKENIZER_MAPPING,
            convert_gguf_tokenizer,
        )
    except ImportError:
        raise GGUFTokenizerError(
            "Rebuilding this tokenizer needs a newer transformers than the one installed."
        ) from None
    renames = GGUF_TOKENIZER_MAPPING["tokenizer"]
    tdict = {
        name: meta[f"tokenizer.{key}"]
        for key, name in renames.items()
        if f"tokenizer.{key}" in meta
    }
    try:
        tok, _ = convert_gguf_tokenizer(architecture, tdict)
    except Exception as exc:  # noqa: BLE001 - one plain line
        from app.errors import user_message

        raise GGUFTokenizerError(
            f"Its {meta.get('tokenizer.ggml.model')!r} tokenizer could not be rebuilt: "
            f"{user_message(exc)}"
        ) from None
    types = [int(t) for t in meta.get("tokenizer.ggml.token_type") or []]
    tokens = meta["tokenizer.ggml.tokens"]
    specials = [tokens[i] for i, t in enumerate(types) if t == CONTROL]
    return tok, specials, "PreTrainedTokenizerFast"


def _add_bos_eos(tok, meta: dict, bos: str | None, eos: str | None, byte_level: bool) -> None:
    """Encode BOS/EOS the way llama.cpp does for this file (a TemplateProcessing step)."""
    if bos is None and eos is None:
        return
    from tokenizers import processors

    ids = {
        bos: meta.get("tokenizer.ggml.bos_token_id"),
        eos: meta.get("tokenizer.ggml.eos_token_id"),
    }
    head = f"{bos}:0 " if bos else ""
    tail = f" {eos}:0" if eos else ""
    template: processors.PostProcessor = processors.TemplateProcessing(
        single=f"{head}$A:0{tail}",
        pair=f"{head}$A:0{tail} {head.replace(':0', ':1')}$B:1{tail.replace(':0', ':1')}",
        special_tokens=[(t, int(i)) for t, i in ids.items() if t is not None and i is not None],
    )
    if byte_level:
        template = processors.Sequence([processors.ByteLevel(trim_offsets=False), template])
    tok.post_processor = template


def _metadata_problem(meta: dict) -> str | None:
    """What is wrong with the tokenizer arrays (their kinds and lengths), before any use."""
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        return "its vocabulary is not a list of texts"
    for key, kind, what in (("token_type", int, "token types"),
                            ("scores", (int, float), "token scores")):
        values = meta.get(f"tokenizer.ggml.{key}")
        if values is None:
            continue
        if not isinstance(values, list) or not all(isinstance(v, kind) for v in values):
            return f"its {what} are not numbers"
        if len(values) != len(tokens):
            return f"it lists {len(values):,} {what} for {len(tokens):,} tokens"
    merges = meta.get("tokenizer.ggml.merges")
    if merges is not None and (not isinstance(merges, list)
                               or not all(isinstance(m, str) and " " in m for m in merges)):
        return "its merges are not pairs of texts"
    return None


def build_tokenizer_files(meta: dict, folder: Path, *, context_length: int | None) -> bool:
    if not meta.get("tokenizer.ggml.tokens"):
        raise GGUFTokenizerError("The file has no tokenizer (no tokenizer.ggml.tokens).")
    problem = _metadata_problem(meta)
    if problem:
        raise GGUFTokenizerError(f"The file's tokenizer is damaged: {problem}.")
    model = meta.get("tokenizer.ggml.model")
    architecture = str(meta.get("general.architecture") or "")
    try:
        if model == "gpt2":
            tok, specials, tok_class = _byte_level(meta)
        elif model in ("llama", "t5", "gemma4"):
            tok, specials, tok_class = _via_transformers(meta, architecture)
        else:
            raise GGUFTokenizerError(
                f"DraftPair cannot rebuild a {model!r} tokenizer from a GGUF.")
    except GGUFTokenizerError:
        raise
    except Exception:  # noqa: BLE001 - the tokenizers library refusing what the file holds
        raise GGUFTokenizerError("The file's tokenizer is damaged: its vocabulary or merges "
                                 "cannot be rebuilt.") from None
    bos, eos = _token(meta, "bos_token_id"), _token(meta, "eos_token_id")
    pad, unk = _token(meta, "padding_token_id"), _token(meta, "unknown_token_id")
    add_bos = meta.get("tokenizer.ggml.add_bos_token")
    if add_bos is None:  # llama.cpp adds BOS to a SentencePiece vocabulary that does not say
        add_bos = model == "llama"
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token"))
    _add_bos_eos(tok, meta, bos if add_bos else None, eos if add_eos else None, model == "gpt2")
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))

    special_map: dict = {}
    for key, value in (("bos_token", bos), ("eos_token", eos), ("pad_token", pad)):
        if value is not None:
            special_map[key] = value
    if unk is not None or model == "gpt2":
        special_map["unk_token"] = unk
    special_map["additional_special_tokens"] = [
        s for s in specials if s not in (bos, eos, pad, unk)
    ]
    cfg: dict = {
        "add_bos_token": bool(add_bos),
        "add_prefix_space": bool(meta.get("tokenizer.ggml.add_space_prefix", False)),
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(context_length or 2048),
        "tokenizer_class": tok_class,
    }
    if add_eos:
        cfg["add_eos_token"] = True
    template = meta.get("tokenizer.chat_template")
    if isinstance(template, str) and template.strip():
        cfg["chat_template"] = template
    cfg.update(special_map)
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (folder / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")
    return "chat_template" in cfg
