"""The speedup chart as a PNG, drawn in pure Python (zlib + struct, no Qt, no matplotlib).

Horizontal bars: one group per task and temperature, one bar per condition, speedup over
DraftPair's plain decoding, with the 1.0x line. Labels use a built-in 5x7 pixel font (upper
case only), which keeps the benchmark layer free of GUI libraries.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

Color = tuple[int, int, int]

# 5x7 glyphs: seven rows, five bits per row (bit 4 = leftmost pixel)
_FONT: dict[str, tuple[int, ...]] = {
    "A": (14, 17, 17, 31, 17, 17, 17), "B": (30, 17, 17, 30, 17, 17, 30),
    "C": (14, 17, 16, 16, 16, 17, 14), "D": (28, 18, 17, 17, 17, 18, 28),
    "E": (31, 16, 16, 30, 16, 16, 31), "F": (31, 16, 16, 30, 16, 16, 16),
    "G": (14, 17, 16, 23, 17, 17, 15), "H": (17, 17, 17, 31, 17, 17, 17),
    "I": (14, 4, 4, 4, 4, 4, 14), "J": (7, 2, 2, 2, 2, 18, 12),
    "K": (17, 18, 20, 24, 20, 18, 17), "L": (16, 16, 16, 16, 16, 16, 31),
    "M": (17, 27, 21, 21, 17, 17, 17), "N": (17, 17, 25, 21, 19, 17, 17),
    "O": (14, 17, 17, 17, 17, 17, 14), "P": (30, 17, 17, 30, 16, 16, 16),
    "Q": (14, 17, 17, 17, 21, 18, 13), "R": (30, 17, 17, 30, 20, 18, 17),
    "S": (15, 16, 16, 14, 1, 1, 30), "T": (31, 4, 4, 4, 4, 4, 4),
    "U": (17, 17, 17, 17, 17, 17, 14), "V": (17, 17, 17, 17, 17, 10, 4),
    "W": (17, 17, 17, 21, 21, 21, 10), "X": (17, 17, 10, 4, 10, 17, 17),
    "Y": (17, 17, 17, 10, 4, 4, 4), "Z": (31, 1, 2, 4, 8, 16, 31),
    "0": (14, 17, 19, 21, 25, 17, 14), "1": (4, 12, 4, 4, 4, 4, 14),
    "2": (14, 17, 1, 2, 4, 8, 31), "3": (31, 2, 4, 2, 1, 17, 14),
    "4": (2, 6, 10, 18, 31, 2, 2), "5": (31, 16, 30, 1, 1, 17, 14),
    "6": (6, 8, 16, 30, 17, 17, 14), "7": (31, 1, 2, 4, 8, 8, 8),
    "8": (14, 17, 17, 14, 17, 17, 14), "9": (14, 17, 17, 15, 1, 2, 12),
    " ": (0, 0, 0, 0, 0, 0, 0), ".": (0, 0, 0, 0, 0, 12, 12), ",": (0, 0, 0, 0, 12, 4, 8),
    "-": (0, 0, 0, 31, 0, 0, 0), "=": (0, 0, 31, 0, 31, 0, 0), ":": (0, 12, 12, 0, 12, 12, 0),
    "(": (2, 4, 8, 8, 8, 4, 2), ")": (8, 4, 2, 2, 2, 4, 8), "/": (1, 1, 2, 4, 8, 16, 16),
    "%": (24, 25, 2, 4, 8, 19, 3), "_": (0, 0, 0, 0, 0, 0, 31), "+": (0, 4, 4, 31, 4, 4, 0),
    "<": (2, 4, 8, 16, 8, 4, 2), ">": (8, 4, 2, 1, 2, 4, 8), "?": (14, 17, 1, 2, 4, 0, 4),
}

WHITE: Color = (255, 255, 255)
BLACK: Color = (30, 30, 30)
GREY: Color = (170, 170, 170)
PALETTE: tuple[Color, ...] = (
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75),
)


class Canvas:
    def __init__(self, width: int, height: int, background: Color = WHITE):
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        x0, x1 = max(0, min(x0, x1)), min(self.width, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.height, max(y0, y1))
        row = bytes(color) * (x1 - x0)
        for y in range(y0, y1):
            start = (y * self.width + x0) * 3
            self.pixels[start : start + len(row)] = row

    def text(self, x: int, y: int, s: str, color: Color = BLACK, scale: int = 2) -> int:
        """Draw ``s`` with its top-left at (x, y); returns the x after the last glyph."""
        for ch in s.upper():
            glyph = _FONT.get(ch, _FONT["?"])
            for r, bits in enumerate(glyph):
                for c in range(5):
                    if bits & (16 >> c):
                        px, py = x + c * scale, y + r * scale
                        self.rect(px, py, px + scale, py + scale, color)
            x += 6 * scale
        return x

    def png(self) -> bytes:
        raw = b"".join(
            b"\x00" + bytes(self.pixels[y * self.width * 3 : (y + 1) * self.width * 3])
            for y in range(self.height)
        )

        def chunk(tag: bytes, data: bytes) -> bytes:
            body = tag + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def render_speedup_chart(summary: dict[str, Any], title: str = "Speedup vs plain decoding") -> bytes:
    """PNG bytes of the speedup chart for ``summary`` (``BenchReport.summary``)."""
    rows = [r for r in summary.get("rows", []) if r["condition"] != "off"]
    conditions = list(dict.fromkeys(r["condition"] for r in rows))
    colors = {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(conditions)}
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["task_id"], r["temperature"]), []).append(r)
    bar_h, gap, label_w, margin = 16, 14, 300, 20
    width = 1000
    legend_h = 24 * ((len(conditions) + 2) // 3) + 10
    height = margin * 2 + 40 + legend_h + sum(len(g) * (bar_h + 4) + gap for g in groups.values())
    height = max(height, 160)
    cv = Canvas(width, height)
    cv.text(margin, margin, title, scale=2)
    y = margin + 30
    for i, c in enumerate(conditions):
        x = margin + (i % 3) * 320
        yy = y + (i // 3) * 24
        cv.rect(x, yy, x + 16, yy + 14, colors[c])
        cv.text(x + 24, yy, c, scale=2)
    y += legend_h
    speeds = [r["speedup"] for r in rows if r["speedup"] is not None]
    top = max([2.0, *(s * 1.1 for s in speeds)])
    x0, x1 = margin + label_w, width - margin - 90

    def xpos(v: float) -> int:
        return x0 + int((x1 - x0) * min(v, top) / top)

    plot_top = y
    for (task_id, temp), grp in groups.items():
        cv.text(margin, y + 2, f"{task_id} T={temp:g}", scale=2)
        for r in grp:
            s = r["speedup"]
            if s is not None:
                cv.rect(x0, y, xpos(s), y + bar_h, colors[r["condition"]])
                label = f"{s:.2f}X" + ("" if r["verdict"] != "no clear difference" else " ?")
                cv.text(xpos(s) + 6, y + 1, label, scale=2)
            else:
                cv.text(x0 + 6, y + 1, "N/A", color=GREY, scale=2)
            y += bar_h + 4
        y += gap
    cv.rect(x0, plot_top - 4, x0 + 1, y, BLACK)
    one = xpos(1.0)
    for yy in range(plot_top - 4, y, 6):  # dashed 1.0x line
        cv.rect(one, yy, one + 2, yy + 3, GREY)
    cv.text(one - 18, y + 2, "1.0X", color=GREY, scale=2)
    return cv.png()
