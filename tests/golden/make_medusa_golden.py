"""Write tests/golden/medusa_golden.npz: Medusa heads' logits on shared random weights,
computed with the reference implementation's math in plain numpy. test_medusa.py loads the
same weights through DraftPair's Medusa kind and compares.

Reference: FasterDecoding/Medusa, ``medusa/model/medusa_model.py``::

    class ResBlock(nn.Module):
        def __init__(self, hidden_size):
            self.linear = nn.Linear(hidden_size, hidden_size)
            torch.nn.init.zeros_(self.linear.weight)
            self.act = nn.SiLU()
        def forward(self, x):
            return x + self.act(self.linear(x))

    self.medusa_head = nn.ModuleList([
        nn.Sequential(*([ResBlock(self.hidden_size)] * medusa_num_layers),
                      nn.Linear(self.hidden_size, self.vocab_size, bias=False))
        for _ in range(medusa_num_heads)])
    ...
    medusa_logits = [self.medusa_head[i](hidden_states) for i in range(self.medusa)]

(``hidden_states``: the base model's last hidden state, after its final norm). Note
``[ResBlock(h)] * layers`` repeats one block: its ``state_dict`` names it once per layer,
with the same tensors; the golden weights do the same.

    python tests/golden/make_medusa_golden.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OUT = Path(__file__).with_name("medusa_golden.npz")
HIDDEN, VOCAB, HEADS, LAYERS, ROWS = 16, 48, 3, 2, 5


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def main() -> None:
    rng = np.random.default_rng(7)
    out: dict[str, np.ndarray] = {}
    h = rng.normal(size=(ROWS, HIDDEN)).astype(np.float32)
    out["input"] = h
    logits = []
    for i in range(HEADS):
        # one ResBlock repeated LAYERS times (the reference's list multiplication)
        w = (0.3 * rng.normal(size=(HIDDEN, HIDDEN))).astype(np.float32)
        b = (0.1 * rng.normal(size=(HIDDEN,))).astype(np.float32)
        lm = rng.normal(size=(VOCAB, HIDDEN)).astype(np.float32)
        for j in range(LAYERS):
            out[f"medusa_head.{i}.{j}.linear.weight"] = w
            out[f"medusa_head.{i}.{j}.linear.bias"] = b
        out[f"medusa_head.{i}.{LAYERS}.weight"] = lm
        x = h.astype(np.float64)
        for _ in range(LAYERS):
            x = x + silu(x @ w.T.astype(np.float64) + b)
        logits.append(x @ lm.T.astype(np.float64))
    out["logits"] = np.stack(logits, axis=1).astype(np.float32)  # (ROWS, HEADS, VOCAB)
    np.savez(OUT, **out)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
