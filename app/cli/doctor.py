"""``draftpair doctor``: what this machine runs DraftPair on."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="MLX backend, BLAS, memory, versions")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def collect() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    import mlx.core as mx
    import psutil

    from app.engine.platform import blas_status

    versions: dict[str, str | None] = {}
    for pkg in ("mlx", "mlx-lm", "transformers", "huggingface_hub", "PySide6-Essentials",
                "pyqtgraph", "numpy"):
        try:
            versions[pkg] = version(pkg)
        except PackageNotFoundError:
            versions[pkg] = None
    status = blas_status()
    vm = psutil.virtual_memory()
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": psutil.cpu_count(),
        "memory_total_bytes": vm.total,
        "memory_available_bytes": vm.available,
        "backend": status.backend,
        "blas": status.to_dict(),
        "default_device": str(mx.default_device()),
        "versions": versions,
        "precision": "float32 for unquantized weights; quantized layers of small models "
        "(drafts under 256 MB as float32) expanded to float32 (fastest on CPU)"
        if status.backend == "cpu" else "as stored (4-bit stays 4-bit on GPU)",
    }
    try:
        from app.demo.target import demo_target_info

        info["demo"] = demo_target_info()
    except Exception as exc:  # the demo module is optional at this point
        from app.errors import user_message

        info["demo"] = {"status": f"unavailable: {user_message(exc)}"}
    return info


def run(args: argparse.Namespace) -> int:
    info = collect()
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    blas = info["blas"]
    assert isinstance(blas, dict)
    gib = 1024**3
    print("DraftPair doctor")
    print(f"  python        {info['python']} on {info['platform']}")
    print(f"  backend       {info['backend']} ({info['default_device']})")
    print(f"  BLAS          {blas['blas']}" + (f"  [{blas['library']}]" if blas["library"] else ""))
    print(f"  precision     {info['precision']}")
    print(f"  memory        {int(info['memory_total_bytes']) / gib:.1f} GiB total, "
          f"{int(info['memory_available_bytes']) / gib:.1f} GiB available, "
          f"{info['cpu_count']} CPUs")
    for pkg, ver in dict(info["versions"]).items():
        print(f"  {pkg:<13} {ver or 'not installed'}")
    demo = info.get("demo")
    if isinstance(demo, dict):
        print("  demo pair     " + ", ".join(f"{k}: {v}" for k, v in demo.items()))
    if blas.get("warning"):
        print(f"\nWARNING: {blas['warning']}", file=sys.stderr)
    return 0
