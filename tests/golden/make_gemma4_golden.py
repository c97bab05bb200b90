"""Write tests/golden/gemma4_assistant_golden.npz: the proposals mlx-vlm's Gemma 4 MTP
assistant makes on the tiny random-weight pair of tests/builders_gemma4.py, in the scenario
of tests/gemma4_scenario.py. test_gemma4_assistant.py compares DraftPair's drafter against
these arrays. mlx-vlm is not a dependency; its Gemma 4 package imports transformers' image
code, so this runs in a fresh process with image stubs installed first.

Reference: mlx-vlm 0.7.10, ``mlx_vlm/speculative/drafters/gemma4_assistant/gemma4_assistant.py``
(``Gemma4AssistantDraftModel.set_shared_kv`` + ``draft_block``, greedy; masks from
``masks.py``), unpacked from its wheel:

    python tests/golden/make_gemma4_golden.py --mlx-vlm /work/ref/mlxvlm
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests import gemma4_scenario as sc  # noqa: E402

OUT = Path(__file__).with_name("gemma4_assistant_golden.npz")
VARIANTS = {"window8": {}, "window32": {"window": 32}, "seed3": {"seed": 3}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mlx-vlm", type=Path, default=sc.REF)
    args = ap.parse_args()
    sc._stub_images()  # before anything imports transformers
    sc.e3.import_mlx_vlm(args.mlx_vlm)
    importlib.import_module("mlx_vlm.speculative.drafters.gemma4_assistant")
    from tests import builders_gemma4 as bg

    out: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, kw in VARIANTS.items():
            target, drafter = bg.make_pair(Path(tmp), **kw)
            out[name] = np.array(sc.mlx_vlm(target, drafter, args.mlx_vlm), dtype=np.int64)
            print(name, out[name].tolist())
    np.savez(OUT, **out)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
