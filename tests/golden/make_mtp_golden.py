"""Regenerate ``mtp_qwen3_5.json``: mlx-vlm's ``qwen3_5_mtp`` drafter on the test checkpoint.

mlx-vlm is not a DraftPair dependency (it pulls in image/audio stacks), so its drafter
module files are imported straight from an unpacked mlx-vlm source tree (0.7.x), with the
package ``__init__`` files that import those stacks bypassed. The script builds the tiny
Qwen3.5 checkpoint of ``tests/builders_mtp.py`` (random weights, HF layout), loads the
``mtp.*`` tensors into mlx-vlm's drafter with mlx-vlm's own ``sanitize``, and runs a greedy
speculative loop in which the target's states come from a fresh mlx-lm pass over the whole
sequence every round (no cache rollback involved). It records the drafter's proposals, the
scripted accepted counts and the target's tokens; ``tests/test_mtp_crosscheck.py`` replays the same
rounds with DraftPair's MTP drafter and asserts identical proposals.

    python tests/golden/make_mtp_golden.py --mlx-vlm /path/to/mlx_vlm_src/mlx_vlm
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

PROMPT = [5, 17, 42, 99, 7, 150, 23, 64, 201, 11, 3, 77]
WIDTH = 3  # proposals per round (mlx-vlm block_size = WIDTH + 1)
# Accepted proposals per round. Random heads never agree with a random target, so the rounds
# keep a scripted number of proposals (the drafter's bookkeeping for 0..WIDTH accepted is
# what is compared); the token after them is the target's own greedy choice there.
ACCEPT = [0, 1, 3, 2, 0, 3, 3, 1, 0, 2, 1, 3]


def import_mlx_vlm_drafter(root: Path):
    """``mlx_vlm.speculative.drafters.qwen3_5_mtp`` without running mlx-vlm's package inits."""
    pkgs = ["", "speculative", "speculative/drafters", "models", "models/qwen3_5",
            "models/qwen3_5_moe", "models/qwen3_vl"]
    for rel in pkgs:
        name = "mlx_vlm" + ("." + rel.replace("/", ".") if rel else "")
        mod = types.ModuleType(name)
        mod.__path__ = [str(root / rel) if rel else str(root)]
        sys.modules.setdefault(name, mod)

    class _Stub(types.ModuleType):  # models/base.py imports PIL.Image for type hints only
        def __getattr__(self, key):
            if key.startswith("__"):
                raise AttributeError(key)
            return type(key, (), {})

    if importlib.util.find_spec("PIL") is None:
        sys.modules["PIL"] = _Stub("PIL")
        sys.modules["PIL.Image"] = _Stub("PIL.Image")
        sys.modules["PIL"].Image = sys.modules["PIL.Image"]
    return importlib.import_module("mlx_vlm.speculative.drafters.qwen3_5_mtp")


def target_states(model, tokens: list[int]):
    """Post-final-norm states of every position (what mlx-vlm's Qwen3.5 verify returns)."""
    import mlx.core as mx

    lm = model.language_model
    return lm.model(mx.array(tokens, dtype=mx.uint32)[None])  # (1, n, H), normed


def greedy_next(model, states):
    import mlx.core as mx

    lm = model.language_model
    logits = lm.lm_head(states) if hasattr(lm, "lm_head") else lm.model.embed_tokens.as_linear(states)
    return mx.argmax(logits, axis=-1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mlx-vlm", type=Path, default=Path("/work/ref/mlx_vlm_src/mlx_vlm"))
    ap.add_argument("--out", type=Path, default=HERE / "mtp_qwen3_5.json")
    a = ap.parse_args()

    import mlx.core as mx
    from mlx_lm.utils import load_model

    from tests.builders_mtp import make_qwen3_5_checkpoint

    vlm = import_mlx_vlm_drafter(a.mlx_vlm)
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_qwen3_5_checkpoint(Path(tmp) / "q35")
        config = json.loads((folder / "config.json").read_text())
        model, _ = load_model(folder)
        raw = mx.load(str(folder / "model.safetensors"))
        mtp = {k: v for k, v in raw.items() if k.startswith("mtp.")}
        checksum = float(sum(mx.sum(v * v).item() for v in mtp.values()))

        cfg = vlm.ModelConfig.from_dict({"model_type": "qwen3_5_mtp",
                                         "text_config": config["text_config"],
                                         "block_size": WIDTH + 1})
        drafter = vlm.Model(cfg)
        drafter.load_weights(list(drafter.sanitize(mtp).items()), strict=True)
        mx.eval(drafter.parameters())
        drafter.reset(model)
        greedy = dict(sampler=lambda x: mx.argmax(x, axis=-1), greedy=True)

        seq = list(PROMPT)
        states = target_states(model, seq)
        bonus = int(greedy_next(model, states[:, -1:, :]).item())
        drafter.prefill_from_target_hidden(mx.array([seq]), states, bonus, **greedy)
        seq.append(bonus)
        rounds = []
        for accepted in ACCEPT:
            draft = drafter.draft_block(bonus, states[:, -1:, :], None, WIDTH + 1, **greedy)
            proposals = [int(t) for t in draft[0].tolist()]
            full = target_states(model, seq + proposals)
            verify = full[:, len(seq) - 1 :, :]  # rows for [bonus, d_1..d_k]
            wants = [int(t) for t in greedy_next(model, verify)[0].tolist()]
            new = wants[accepted]
            drafter.accept_verified_tokens(verify, draft, accepted, [new], **greedy)
            rounds.append({"proposals": proposals, "accepted": accepted, "token": new})
            seq += proposals[:accepted] + [new]
            bonus = new
        out = {
            "source": "mlx-vlm speculative/drafters/qwen3_5_mtp (0.7.x), greedy",
            "builder": "tests/builders_mtp.make_qwen3_5_checkpoint(seed=0)",
            "mtp_checksum": checksum,
            "prompt": PROMPT,
            "width": WIDTH,
            "first_bonus": int(seq[len(PROMPT)]),
            "rounds": rounds,
            "sequence": seq,
        }
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    acc = sum(r["accepted"] for r in rounds)
    print(f"wrote {a.out}: {len(rounds)} rounds, {acc} of {len(rounds) * WIDTH} accepted")


if __name__ == "__main__":
    main()
