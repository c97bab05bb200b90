"""Write tests/golden/eagle3_golden.npz: the proposals mlx-vlm's EAGLE-3 drafter makes on the
tiny random-weight pairs of tests/builders_eagle3.py, in the scenario of
tests/eagle3_scenario.py. test_eagle3.py compares DraftPair's drafter against these arrays
(and against mlx-vlm itself where it is unpacked). mlx-vlm is not a dependency.

Reference: mlx-vlm 0.7.10, ``mlx_vlm/speculative/drafters/eagle3/eagle3.py``
(``Eagle3DraftModel``: ``prefill_from_target_hidden``, ``draft_block``,
``accept_verified_tokens``, greedy), unpacked from its wheel:

    python tests/golden/make_eagle3_golden.py --mlx-vlm /work/ref/mlxvlm
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests import builders_eagle3 as be  # noqa: E402
from tests import eagle3_scenario as sc  # noqa: E402

OUT = Path(__file__).with_name("eagle3_golden.npz")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mlx-vlm", type=Path, default=sc.REF, help="unpacked mlx-vlm (the folder "
                    "holding mlx_vlm/)")
    args = ap.parse_args()
    out: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, layout, reduced, opts in sc.VARIANTS:
            target, drafter = be.make_pair(Path(tmp), layout, reduced=reduced, **opts)
            out[name] = np.array(sc.mlx_vlm(target, drafter, args.mlx_vlm), dtype=np.int64)
            print(name, out[name].tolist())
    np.savez(OUT, **out)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
