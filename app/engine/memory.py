"""Memory sampling: MLX active/cache/peak, process RSS, system use, swap, macOS pressure."""

from __future__ import annotations

import subprocess
import sys
import time

import mlx.core as mx

from app.engine.events import MemorySample

_PRESSURE = {1: "normal", 2: "warn", 4: "critical"}


def _macos_pressure() -> str | None:
    if sys.platform != "darwin":
        return None
    try:
        out = subprocess.run(
            ["sysctl", "-n", "kern.memorystatus_vm_pressure_level"],
            capture_output=True,
            text=True,
            timeout=1,
        ).stdout.strip()
        return _PRESSURE.get(int(out), out or None)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


class MemorySampler:
    """Samples at most every ``interval_s`` seconds (cheap enough to call once per round)."""

    def __init__(self, interval_s: float = 0.25, t0: float | None = None):
        import psutil

        self._proc = psutil.Process()
        self._psutil = psutil
        self.interval_s = interval_s
        self.t0 = time.perf_counter() if t0 is None else t0
        self._last = -1e9
        self._last_pressure_check = -1e9
        self._pressure: str | None = None

    def due(self) -> bool:
        return time.perf_counter() - self._last >= self.interval_s

    def sample(self) -> MemorySample:
        now = time.perf_counter()
        self._last = now
        vm = self._psutil.virtual_memory()
        swap = self._psutil.swap_memory()
        if now - self._last_pressure_check > 2.0:
            self._pressure = _macos_pressure()
            self._last_pressure_check = now
        return MemorySample(
            t_ms=(now - self.t0) * 1e3,
            mlx_active_bytes=int(mx.get_active_memory()),
            mlx_cache_bytes=int(mx.get_cache_memory()),
            mlx_peak_bytes=int(mx.get_peak_memory()),
            rss_bytes=int(self._proc.memory_info().rss),
            system_used_fraction=float(vm.percent) / 100.0,
            swap_used_bytes=int(swap.used),
            pressure=self._pressure,
        )
