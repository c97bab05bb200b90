"""Backend detection and the Linux BLAS fix.

MLX's Linux CPU wheel bundles the reference (netlib) BLAS. A block verification of 8
tokens then costs about as much as 8 single steps and speculation cannot win. An
optimized BLAS preloaded with ``LD_PRELOAD`` replaces its symbols (10-35x faster
matmuls here). ``LD_PRELOAD`` only takes effect at process start, so the CLI re-executes
itself once when it finds a better BLAS on the system.

This module must stay importable without importing mlx (start-up path).

Command line (used by the Makefile):
    python -m app.engine.platform ensure-blas    locate an optimized BLAS (or say how to install it)
    python -m app.engine.platform exec -- CMD    run CMD with the BLAS preloaded
    python -m app.engine.platform info           print what was found
"""

from __future__ import annotations

import glob
import importlib.util
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

REEXEC_MARK = "DRAFTPAIR_BLAS_REEXEC"
DISABLE_ENV = "DRAFTPAIR_NO_BLAS_FIX"
OVERRIDE_ENV = "DRAFTPAIR_BLAS"
APT_PACKAGE = "libopenblas0-pthread"


def _multiarch() -> str:
    machine = platform.machine()
    return {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}.get(
        machine, f"{machine}-linux-gnu"
    )


def candidate_blas_paths() -> list[str]:
    """Optimized BLAS libraries to try, best first."""
    arch = _multiarch()
    paths = [
        f"/usr/lib/{arch}/openblas-pthread/libopenblas.so.0",
        f"/usr/lib/{arch}/libopenblas.so.0",
        f"/usr/lib/{arch}/openblas-openmp/libopenblas.so.0",
        "/usr/lib64/libopenblas.so.0",
        "/usr/lib64/libopenblasp.so.0",
        "/usr/lib/libopenblas.so.0",
        f"/usr/lib/{arch}/blis-pthread/libblis.so.4",
    ]
    override = os.environ.get(OVERRIDE_ENV)
    if override:
        paths.insert(0, override)
    return paths


def find_optimized_blas() -> str | None:
    for path in candidate_blas_paths():
        if os.path.exists(path):
            return path
    return None


def mlx_bundled_reference_blas() -> str | None:
    """Path of the reference BLAS bundled with MLX's Linux CPU wheel, if that is what it links."""
    if sys.platform != "linux":
        return None
    spec = importlib.util.find_spec("mlx")
    if spec is None or not spec.submodule_search_locations:
        return None
    site = Path(next(iter(spec.submodule_search_locations))).parent
    hits = sorted(glob.glob(str(site / "mlx*.libs" / "libblas*.so*")))
    return hits[0] if hits else None


def needs_blas_fix() -> bool:
    return sys.platform == "linux" and mlx_bundled_reference_blas() is not None


def preload_contains(path: str) -> bool:
    return path in os.environ.get("LD_PRELOAD", "").split(":")


def env_with_blas(env: dict[str, str] | None = None) -> tuple[dict[str, str], str | None]:
    """A copy of ``env`` whose LD_PRELOAD carries the optimized BLAS (when one is needed and found)."""
    env = dict(os.environ if env is None else env)
    if env.get(DISABLE_ENV) or not needs_blas_fix():
        return env, None
    lib = find_optimized_blas()
    if lib is None:
        return env, None
    current = [p for p in env.get("LD_PRELOAD", "").split(":") if p]
    if lib not in current:
        env["LD_PRELOAD"] = ":".join([lib, *current])
    return env, lib


def maybe_reexec_with_blas(argv: list[str] | None = None) -> None:
    """Re-execute this process once with an optimized BLAS preloaded, if that helps.

    Called at CLI start-up before mlx is imported. Does nothing on macOS, when the BLAS is
    already preloaded, when disabled with DRAFTPAIR_NO_BLAS_FIX=1, or after one re-exec.
    """
    if os.environ.get(REEXEC_MARK) or os.environ.get(DISABLE_ENV):
        return
    if "mlx.core" in sys.modules or not needs_blas_fix():
        return
    lib = find_optimized_blas()
    if lib is None or preload_contains(lib):
        return
    env, _ = env_with_blas()
    env[REEXEC_MARK] = "1"
    args = list(sys.argv[1:] if argv is None else argv)
    if getattr(sys, "frozen", False):
        cmd = [sys.executable, *args]
    else:
        cmd = [sys.executable, "-m", "app", *args]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(cmd[0], cmd, env)
    except OSError:
        return  # keep running with the slow BLAS; `doctor` will say so


@dataclass(frozen=True)
class BlasStatus:
    backend: str  # metal | cuda | cpu
    blas: str  # what the running process uses, in words
    library: str | None  # path of the loaded BLAS library, when known
    optimized: bool
    warning: str | None

    def to_dict(self) -> dict[str, object]:
        return {
            "backend": self.backend,
            "blas": self.blas,
            "library": self.library,
            "optimized": self.optimized,
            "warning": self.warning,
        }


def detect_backend() -> str:
    import mlx.core as mx

    try:
        if mx.metal.is_available():
            return "metal"
    except Exception:
        pass
    try:
        if hasattr(mx, "cuda") and mx.cuda.is_available():
            return "cuda"
    except Exception:
        pass
    return "cpu"


def _loaded_libraries() -> list[str]:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            return sorted({line.split()[-1] for line in fh if ".so" in line})
    except OSError:
        return []


def blas_status() -> BlasStatus:
    """Which BLAS the running process actually uses (imports mlx)."""
    backend = detect_backend()
    if backend == "metal":
        return BlasStatus(backend, "Metal GPU kernels (Accelerate on CPU)", None, True, None)
    if sys.platform != "linux":
        return BlasStatus(backend, "platform default", None, True, None)
    libs = _loaded_libraries()
    for name, label in (("libopenblas", "OpenBLAS"), ("libblis", "BLIS"), ("libmkl", "Intel MKL")):
        hit = next((p for p in libs if os.path.basename(p).startswith(name)), None)
        if hit:
            return BlasStatus(backend, f"{label} (preloaded)", hit, True, None)
    ref = next((p for p in libs if os.path.basename(p).startswith("libblas")), None)
    if ref:
        hint = (
            f"MLX is using the slow reference BLAS bundled with its Linux wheel. "
            f"Install an optimized one (Debian/Ubuntu: apt-get install {APT_PACKAGE}) "
            f"and restart; speculative decoding cannot pay off without it."
        )
        if os.environ.get(DISABLE_ENV):
            hint = f"Optimized BLAS disabled by {DISABLE_ENV}; " + hint
        return BlasStatus(backend, "reference BLAS (slow)", ref, False, hint)
    return BlasStatus(backend, "unknown", None, False, None)


def ensure_blas(*, quiet: bool = False) -> int:
    """Say whether an optimized BLAS is available, and how to install one if not.

    Installing it is the system's job (``packaging/linux-deps.sh``, run by ``make setup``);
    the app itself never runs a package manager.
    """
    if not needs_blas_fix():
        if not quiet:
            print("BLAS: nothing to do on this platform.")
        return 0
    lib = find_optimized_blas()
    if lib:
        if not quiet:
            print(f"BLAS: optimized library found: {lib}")
        return 0
    print(
        "WARNING: no optimized BLAS found. DraftPair will work but slowly, and speculation "
        f"will not pay off. Install one, e.g. `sudo apt-get install {APT_PACKAGE}`.",
        file=sys.stderr,
    )
    return 0


def _main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd = argv[0]
    if cmd == "ensure-blas":
        return ensure_blas()
    if cmd == "info":
        print(f"needs fix: {needs_blas_fix()}; bundled: {mlx_bundled_reference_blas()}")
        print(f"optimized: {find_optimized_blas()}")
        return 0
    if cmd == "exec":
        rest = argv[1:]
        if rest and rest[0] == "--":
            rest = rest[1:]
        if not rest:
            print("usage: python -m app.engine.platform exec -- CMD...", file=sys.stderr)
            return 2
        env, lib = env_with_blas()
        if lib is None and needs_blas_fix():
            print("WARNING: running with MLX's slow reference BLAS", file=sys.stderr)
        os.execvpe(rest[0], rest, env)
    print(f"unknown command {cmd!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
