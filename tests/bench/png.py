"""A tiny rasteriser for the benchmark's one plot: lines, dots, text, written as a PNG.

No dependency beyond the standard library: pixels in a bytearray, a 5x7 bitmap font, and a
PNG encoder of a dozen lines (zlib + struct). Enough for a latency-against-size chart.
"""

from __future__ import annotations

import itertools
import math
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

Color = tuple[int, int, int]
WHITE: Color = (255, 255, 255)
BLACK: Color = (0, 0, 0)
GREY: Color = (215, 215, 215)
GREY_DARK: Color = (120, 120, 120)
BLUE: Color = (31, 100, 180)
ORANGE: Color = (220, 110, 20)

# 5x7 glyphs, one string of rows of 5 columns each ('#' on, '.' off); letters with a
# descender (g j p q y µ ,) have two more rows below the baseline.
_FONT_ROWS = {
    " ": ".....|.....|.....|.....|.....|.....|.....",
    "0": ".###.|#...#|#..##|#.#.#|##..#|#...#|.###.",
    "1": "..#..|.##..|..#..|..#..|..#..|..#..|.###.",
    "2": ".###.|#...#|....#|...#.|..#..|.#...|#####",
    "3": "#####|...#.|..#..|...#.|....#|#...#|.###.",
    "4": "...#.|..##.|.#.#.|#..#.|#####|...#.|...#.",
    "5": "#####|#....|####.|....#|....#|#...#|.###.",
    "6": "..##.|.#...|#....|####.|#...#|#...#|.###.",
    "7": "#####|....#|...#.|..#..|.#...|.#...|.#...",
    "8": ".###.|#...#|#...#|.###.|#...#|#...#|.###.",
    "9": ".###.|#...#|#...#|.####|....#|...#.|.##..",
    "A": ".###.|#...#|#...#|#####|#...#|#...#|#...#",
    "B": "####.|#...#|#...#|####.|#...#|#...#|####.",
    "C": ".###.|#...#|#....|#....|#....|#...#|.###.",
    "D": "###..|#..#.|#...#|#...#|#...#|#..#.|###..",
    "E": "#####|#....|#....|####.|#....|#....|#####",
    "F": "#####|#....|#....|####.|#....|#....|#....",
    "G": ".###.|#...#|#....|#.###|#...#|#...#|.####",
    "H": "#...#|#...#|#...#|#####|#...#|#...#|#...#",
    "I": ".###.|..#..|..#..|..#..|..#..|..#..|.###.",
    "J": "..###|...#.|...#.|...#.|...#.|#..#.|.##..",
    "K": "#...#|#..#.|#.#..|##...|#.#..|#..#.|#...#",
    "L": "#....|#....|#....|#....|#....|#....|#####",
    "M": "#...#|##.##|#.#.#|#.#.#|#...#|#...#|#...#",
    "N": "#...#|#...#|##..#|#.#.#|#..##|#...#|#...#",
    "O": ".###.|#...#|#...#|#...#|#...#|#...#|.###.",
    "P": "####.|#...#|#...#|####.|#....|#....|#....",
    "Q": ".###.|#...#|#...#|#...#|#.#.#|#..#.|.##.#",
    "R": "####.|#...#|#...#|####.|#.#..|#..#.|#...#",
    "S": ".####|#....|#....|.###.|....#|....#|####.",
    "T": "#####|..#..|..#..|..#..|..#..|..#..|..#..",
    "U": "#...#|#...#|#...#|#...#|#...#|#...#|.###.",
    "V": "#...#|#...#|#...#|#...#|#...#|.#.#.|..#..",
    "W": "#...#|#...#|#...#|#.#.#|#.#.#|#.#.#|.#.#.",
    "X": "#...#|#...#|.#.#.|..#..|.#.#.|#...#|#...#",
    "Y": "#...#|#...#|.#.#.|..#..|..#..|..#..|..#..",
    "Z": "#####|....#|...#.|..#..|.#...|#....|#####",
    "a": ".....|.....|.###.|....#|.####|#...#|.####",
    "b": "#....|#....|#.##.|##..#|#...#|#...#|####.",
    "c": ".....|.....|.###.|#....|#....|#...#|.###.",
    "d": "....#|....#|.##.#|#..##|#...#|#...#|.####",
    "e": ".....|.....|.###.|#...#|#####|#....|.###.",
    "f": "..##.|.#..#|.#...|###..|.#...|.#...|.#...",
    "g": ".....|.....|.####|#...#|#...#|#..##|.##.#|....#|.###.",
    "h": "#....|#....|#.##.|##..#|#...#|#...#|#...#",
    "i": "..#..|.....|.##..|..#..|..#..|..#..|.###.",
    "j": "...#.|.....|..##.|...#.|...#.|...#.|...#.|#..#.|.##..",
    "k": "#....|#....|#..#.|#.#..|##...|#.#..|#..#.",
    "l": ".##..|..#..|..#..|..#..|..#..|..#..|.###.",
    "m": ".....|.....|##.#.|#.#.#|#.#.#|#...#|#...#",
    "n": ".....|.....|#.##.|##..#|#...#|#...#|#...#",
    "o": ".....|.....|.###.|#...#|#...#|#...#|.###.",
    "p": ".....|.....|####.|#...#|#...#|#...#|####.|#....|#....",
    "q": ".....|.....|.####|#...#|#...#|#...#|.####|....#|....#",
    "r": ".....|.....|#.##.|##..#|#....|#....|#....",
    "s": ".....|.....|.###.|#....|.###.|....#|####.",
    "t": ".#...|.#...|###..|.#...|.#...|.#..#|..##.",
    "u": ".....|.....|#...#|#...#|#...#|#..##|.##.#",
    "v": ".....|.....|#...#|#...#|#...#|.#.#.|..#..",
    "w": ".....|.....|#...#|#...#|#.#.#|#.#.#|.#.#.",
    "x": ".....|.....|#...#|.#.#.|..#..|.#.#.|#...#",
    "y": ".....|.....|#...#|#...#|#...#|#...#|.####|....#|.###.",
    "z": ".....|.....|#####|...#.|..#..|.#...|#####",
    ".": ".....|.....|.....|.....|.....|.##..|.##..",
    ",": ".....|.....|.....|.....|.....|.##..|..#..|.#...",
    ":": ".....|.##..|.##..|.....|.##..|.##..|.....",
    ";": ".....|.##..|.##..|.....|.##..|.##..|..#..|.#...",
    "+": ".....|..#..|..#..|#####|..#..|..#..|.....",
    "-": ".....|.....|.....|#####|.....|.....|.....",
    "(": "...#.|..#..|.#...|.#...|.#...|..#..|...#.",
    ")": ".#...|..#..|...#.|...#.|...#.|..#..|.#...",
    "/": ".....|....#|...#.|..#..|.#...|#....|.....",
    "%": "##...|##..#|...#.|..#..|.#...|#..##|...##",
    "=": ".....|.....|#####|.....|#####|.....|.....",
    "_": ".....|.....|.....|.....|.....|.....|#####",
    "<": "...#.|..#..|.#...|#....|.#...|..#..|...#.",
    ">": ".#...|..#..|...#.|....#|...#.|..#..|.#...",
    "?": ".###.|#...#|....#|...#.|..#..|.....|..#..",
    "'": ".##..|..#..|.#...|.....|.....|.....|.....",
    "µ": ".....|.....|#...#|#...#|#...#|#..##|###.#|#....|#....",
}
FONT = {ch: rows.split("|") for ch, rows in _FONT_ROWS.items()}
GLYPH_W, GLYPH_H = 5, 7


class Canvas:
    def __init__(self, width: int, height: int, background: Color = WHITE) -> None:
        self.width = width
        self.height = height
        self.pixels = bytearray(bytes(background) * (width * height))

    def set(self, x: int, y: int, color: Color) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            i = 3 * (y * self.width + x)
            self.pixels[i : i + 3] = bytes(color)

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        for y in range(min(y0, y1), max(y0, y1) + 1):
            for x in range(min(x0, x1), max(x0, x1) + 1):
                self.set(x, y, color)

    def line(
        self, x0: float, y0: float, x1: float, y1: float, color: Color, width: int = 1
    ) -> None:
        steps = max(1, int(max(abs(x1 - x0), abs(y1 - y0))))
        half = width // 2
        for s in range(steps + 1):
            t = s / steps
            x = round(x0 + (x1 - x0) * t)
            y = round(y0 + (y1 - y0) * t)
            self.rect(x - half, y - half, x - half + width - 1, y - half + width - 1, color)

    def dashed(self, x0: int, x1: int, y: int, color: Color, dash: int = 8) -> None:
        """A horizontal dashed line."""
        for x in range(x0, x1 + 1):
            if (x - x0) // dash % 2 == 0:
                self.rect(x, y - 1, x, y, color)

    def dot(self, cx: float, cy: float, radius: int, color: Color) -> None:
        for dy in range(-radius, radius + 1):
            for dx in range(-radius, radius + 1):
                if dx * dx + dy * dy <= radius * radius + radius:
                    self.set(round(cx) + dx, round(cy) + dy, color)

    def text(self, x: int, y: int, text: str, color: Color = BLACK, scale: int = 2) -> None:
        """Draw ``text`` with its top-left corner at (x, y)."""
        for n, ch in enumerate(text):
            glyph = FONT.get(ch, FONT["?"])
            gx = x + n * (GLYPH_W + 1) * scale
            for row, bits in enumerate(glyph):
                for col, bit in enumerate(bits):
                    if bit == "#":
                        self.rect(
                            gx + col * scale,
                            y + row * scale,
                            gx + col * scale + scale - 1,
                            y + row * scale + scale - 1,
                            color,
                        )

    def text_vertical(
        self, x: int, y: int, text: str, color: Color = BLACK, scale: int = 2
    ) -> None:
        """Draw ``text`` rotated a quarter turn anticlockwise, its baseline start at (x, y)."""
        for n, ch in enumerate(text):
            glyph = FONT.get(ch, FONT["?"])
            gy = y - n * (GLYPH_W + 1) * scale
            for row, bits in enumerate(glyph):
                for col, bit in enumerate(bits):
                    if bit == "#":
                        px, py = x + row * scale, gy - col * scale
                        self.rect(px, py - scale + 1, px + scale - 1, py, color)

    def png(self) -> bytes:
        raw = b"".join(
            b"\x00" + bytes(self.pixels[3 * self.width * y : 3 * self.width * (y + 1)])
            for y in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


def text_width(text: str, scale: int = 2) -> int:
    return len(text) * (GLYPH_W + 1) * scale - scale


def _nice_step(span: float, ticks: int = 5) -> float:
    raw = span / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * magnitude:
            return m * magnitude
    return 10 * magnitude


def _label(value: float) -> str:
    if value >= 1000 and value == int(value):
        return f"{int(value):,}"
    if value == int(value):
        return str(int(value))
    return f"{value:g}"


def latency_chart(
    path: Path,
    sizes: Sequence[int],
    series: Sequence[tuple[str, Sequence[float], Color]],
    title: str,
    x_label: str,
    y_label: str,
    note: str = "",
    refs: Sequence[tuple[str, float, Color]] = (),
) -> None:
    """A log-x, linear-y line chart of ``series`` (name, values, color) against ``sizes``.

    ``refs`` are labelled horizontal dashed lines (a target, a baseline).
    """
    width, height = 900, 560
    left, right, top, bottom = 110, 40, 70, 100
    c = Canvas(width, height)
    plot_w, plot_h = width - left - right, height - top - bottom
    y_max_data = max(
        [v for _, values, _ in series for v in values] + [v for _, v, _ in refs], default=1.0
    )
    y_max_data = y_max_data or 1.0
    step = _nice_step(y_max_data * 1.1)
    y_max = step * math.ceil(y_max_data * 1.1 / step)
    lo, hi = math.log10(min(sizes)), math.log10(max(sizes))
    pad = (hi - lo) * 0.06 or 0.5

    def px(size: float) -> float:
        return left + (math.log10(size) - lo + pad) / (hi - lo + 2 * pad) * plot_w

    def py(value: float) -> float:
        return top + plot_h - value / y_max * plot_h

    # Grid and axes.
    ticks = round(y_max / step)
    for i in range(ticks + 1):
        value = i * step
        y = round(py(value))
        c.line(left, y, left + plot_w, y, GREY)
        label = _label(round(value, 6))
        c.text(left - 12 - text_width(label), y - 7, label)
    for size in sizes:
        x = round(px(size))
        c.line(x, top, x, top + plot_h, GREY)
        label = _label(size)
        c.text(x - text_width(label) // 2, top + plot_h + 12, label)
    c.line(left, top, left, top + plot_h, BLACK, 2)
    c.line(left, top + plot_h, left + plot_w, top + plot_h, BLACK, 2)
    # Titles.
    c.text((width - text_width(title, 3)) // 2, 20, title, scale=3)
    c.text(left + (plot_w - text_width(x_label)) // 2, top + plot_h + 44, x_label)
    c.text_vertical(28, top + (plot_h + text_width(y_label)) // 2, y_label)
    if note:
        c.text(left, height - 26, note, (110, 110, 110))
    for label, value, color in refs:
        y = round(py(value))
        c.dashed(left + 2, left + plot_w, y, color)
        c.text(left + plot_w - text_width(label) - 6, y + 6, label, color)
    # Series, then a legend in the top-left corner of the plot.
    for _, values, color in series:
        points = [(px(s), py(v)) for s, v in zip(sizes, values, strict=True)]
        for (x0, y0), (x1, y1) in itertools.pairwise(points):
            c.line(x0, y0, x1, y1, color, 3)
        for x, y in points:
            c.dot(x, y, 5, color)
    for n, (name, _, color) in enumerate(series):
        y = top + 16 + n * 26
        c.line(left + 20, y + 7, left + 60, y + 7, color, 3)
        c.dot(left + 40, y + 7, 5, color)
        c.text(left + 72, y, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(c.png())
