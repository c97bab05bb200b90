"""Human-readable units shared by the CLI, reports and the app (no heavy imports)."""

from __future__ import annotations


def format_bytes(n: float | int | None) -> str:
    if n is None:
        return "?"
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def format_params(n: int | None) -> str:
    """A parameter count for people: "135 M", "1.5 B", "7.0 B"; "?" when unknown."""
    if not n:
        return "?"
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            value = n / div
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return str(n)
