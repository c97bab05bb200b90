"""Build tiny but real checkpoints for tests: mlx-lm format weights + real tokenizer files.

Everything is deterministic (fixed corpus, fixed seeds), so two calls with the same arguments
give byte-identical tokenizers and weights.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b\n",
    "Speculative decoding lets a small model draft tokens that a large model verifies.",
    "Hello! How can I help you today? I can answer questions and fix typos.",
    "for i in range(10):\n    print(i * i)\n",
    "A paragraph with some typos that need fixing before it is published.",
    "The cat sat on the mat. The dog sat on the log. The bird sat on the wire.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20.",
    "Once upon a time there was a tiny model that wanted to be fast.",
    "import os\nimport sys\n\nclass Thing:\n    def __init__(self):\n        self.x = 1\n",
] * 4

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def train_tokenizer(vocab_size: int = 320):
    """A byte-level BPE tokenizer trained on CORPUS (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return tok


def write_tokenizer(
    folder: Path,
    *,
    vocab_size: int = 320,
    permute_seed: int | None = None,
    extra_added: tuple[str, ...] = (),
    eos_token: str = "<|im_end|>",
    chat_template: str | None = CHAT_TEMPLATE,
) -> int:
    """Write tokenizer.json + tokenizer_config.json; return the number of ids.

    ``permute_seed`` reassigns the non-special ids (same size, different mapping: the trap
    that vocab_size equality does not catch).
    """
    folder.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(vocab_size)
    data = json.loads(tok.to_str())
    if permute_seed is not None:
        vocab = data["model"]["vocab"]
        special_ids = {v for k, v in vocab.items() if k in SPECIALS}
        movable = sorted(k for k, v in vocab.items() if v not in special_ids)
        ids = sorted(vocab[k] for k in movable)
        shuffled = ids[:]
        random.Random(permute_seed).shuffle(shuffled)
        for k, new_id in zip(movable, shuffled, strict=True):
            vocab[k] = new_id
    n = len(data["model"]["vocab"])
    for text in extra_added:
        data["added_tokens"].append(
            {
                "id": n,
                "content": text,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
        n += 1
    (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": eos_token,
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "model_max_length": 2048,
        "clean_up_tokenization_spaces": False,
    }
    if chat_template is not None:
        cfg["chat_template"] = chat_template
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
    return n


def make_checkpoint(
    folder: Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int | None = None,
    seed: int = 0,
    tie_word_embeddings: bool = True,
    weight_scale: float = 1.0,
    tokenizer_kwargs: dict | None = None,
    extra_config: dict | None = None,
    max_position_embeddings: int = 2048,
) -> Path:
    """A tiny llama checkpoint in mlx-lm format with real tokenizer files.

    ``vocab_size`` defaults to the tokenizer's size; a larger value gives padded embeddings.
    ``weight_scale`` > 1 sharpens the output distribution (useful for sampling tests).
    """
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_lm.models import llama
    from mlx_lm.utils import save_config, save_model

    folder = Path(folder)
    n_tokens = write_tokenizer(folder, **(tokenizer_kwargs or {}))
    vocab = vocab_size or n_tokens
    eos_id = _token_id(folder, (tokenizer_kwargs or {}).get("eos_token", "<|im_end|>"))
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden_size,
        "num_hidden_layers": num_layers,
        "intermediate_size": intermediate_size,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab,
        "rope_theta": 10000.0,
        "tie_word_embeddings": tie_word_embeddings,
        "max_position_embeddings": max_position_embeddings,
        "eos_token_id": eos_id,
        "torch_dtype": "float32",
    }
    config.update(extra_config or {})
    args = llama.ModelArgs.from_dict(config)
    mx.random.seed(seed)
    model = llama.Model(args)
    if weight_scale != 1.0:
        model.update(tree_map(lambda w: w * weight_scale, model.parameters()))
    mx.eval(model.parameters())
    save_model(folder, model)
    save_config(config, config_path=folder / "config.json")
    return folder


def _token_id(folder: Path, text: str) -> int:
    data = json.loads((folder / "tokenizer.json").read_text())
    for t in data["added_tokens"]:
        if t["content"] == text:
            return int(t["id"])
    return int(data["model"]["vocab"][text])


def make_trained_checkpoint(
    folder: Path,
    *,
    steps: int = 150,
    seed: int = 0,
    lr: float = 3e-3,
    texts: list[str] | None = None,
    **kwargs,
) -> Path:
    """A tiny llama trained for a few seconds on CORPUS (or ``texts``): it produces corpus-like
    text, so prompt lookup finds matches and two such models agree on part of their tokens."""
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    from mlx_lm.utils import load_model, save_model

    folder = Path(make_checkpoint(folder, seed=seed, **kwargs))
    model, _ = load_model(folder)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids: list[int] = []
    for text in texts or CORPUS[:10]:
        ids.extend(tok.encode(text).ids)
    data = mx.array(ids, dtype=mx.int32)
    seq = 48
    starts = list(range(0, len(ids) - seq - 1, 7))
    rng = random.Random(seed)
    optimizer = optim.Adam(learning_rate=lr)

    def loss_fn(m, x, y):
        return nn.losses.cross_entropy(m(x), y).mean()

    grad_fn = nn.value_and_grad(model, loss_fn)
    mx.random.seed(seed)
    for _ in range(steps):
        batch = rng.sample(starts, min(8, len(starts)))
        x = mx.stack([data[s : s + seq] for s in batch])
        y = mx.stack([data[s + 1 : s + seq + 1] for s in batch])
        loss, grads = grad_fn(model, x, y)
        optimizer.update(model, grads)
        mx.eval(model.parameters(), optimizer.state, loss)
    save_model(folder, model)
    return folder


def make_teacher_replies(work: Path, target: Path, *, heldout: int, records: int,
                         max_tokens: int):
    """Real teacher replies of a tiny target in a demo training folder (``work``): held-out
    and training records as ``draftpair demo train --phase generate`` writes them. Returns
    the loaded (model, tokenizer)."""
    from mlx_lm import load

    from app.demo import teacher

    model, tok = load(str(target))
    gen = teacher.TeacherGenerator(work, model, tok, batch=4, max_tokens=max_tokens,
                                   log=lambda m: None)
    gen.generate_heldout(heldout)
    gen.generate(max_records=records)
    return model, tok
