"""Thread hygiene for MLX: a thread that ran MLX frees its streams before it ends.

MLX does not clean up a thread's streams by itself; a process that exits with them left
(an engine thread of the server, the app's worker thread) may abort in teardown
("terminate called without an active exception"). MLX's advice: ``mx.clear_streams()`` at
the end of every thread that used it.
"""

from __future__ import annotations

import sys


def release_mlx_streams() -> None:
    """Destroy the MLX streams of the calling thread (a no-op when MLX was never imported)."""
    if "mlx.core" not in sys.modules:
        return
    import mlx.core as mx

    clear = getattr(mx, "clear_streams", None)
    if clear is not None:
        clear()
