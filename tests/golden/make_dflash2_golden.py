"""Write tests/golden/dflash2_golden.npz: the blocks mlx-vlm's DFlash 2 drafter drafts on the
tiny random-weight pairs of tests/builders_dflash2.py, in the scenario of
tests/dflash2_scenario.py. test_dflash2.py compares DraftPair's drafter against these arrays
(and against mlx-vlm itself where it is unpacked). mlx-vlm is not a dependency.

Reference: mlx-vlm 0.7.10, ``mlx_vlm/speculative/drafters/dflash2/dflash2.py``
(``DFlash2DraftModel.draft_block``, greedy: the candidate selector's argmax), unpacked from
its wheel:

    python tests/golden/make_dflash2_golden.py --mlx-vlm /work/ref/mlxvlm
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests import builders_dflash2 as b2  # noqa: E402
from tests import dflash2_scenario as sc  # noqa: E402

OUT = Path(__file__).with_name("dflash2_golden.npz")
VARIANTS = {"block4": {}, "block6": {"block_size": 6}, "layers25": {"target_layer_ids": (2, 5)}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mlx-vlm", type=Path, default=sc.REF)
    args = ap.parse_args()
    out: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, kw in VARIANTS.items():
            target, drafter = b2.make_pair(Path(tmp), **kw)
            out[name] = np.array(sc.mlx_vlm(target, drafter, args.mlx_vlm), dtype=np.int64)
            print(name, out[name].tolist())
    np.savez(OUT, **out)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
