"""Colours, names and units shared by every render (matplotlib, DOT/SVG, the HTML report).

The colours come from ``oxiwork/palette.json``, the one file the widget's
``widget_js/src/colors.ts`` imports too, so a figure and the widget colour a stream, a
buffer or a kind of node alike.

Example
-------
>>> PALETTE[0], KIND_COLORS["kernel"]
('#4e79a7', '#4e79a7')
>>> format_bytes(114688), format_time(92.6e-6)
('112.00 KiB', '92.6 µs')
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = [
    "KIND_COLORS",
    "MUTED",
    "PALETTE",
    "SLACK_MAX",
    "STRONG",
    "SUBTREE",
    "buffer_color",
    "clip",
    "format_bytes",
    "format_time",
    "mix",
    "plural",
    "printable",
    "slack_color",
    "stream_color",
]

_DATA = json.loads((Path(__file__).resolve().parent.parent / "palette.json").read_text("utf-8"))
PALETTE: tuple[str, ...] = tuple(_DATA["palette"])
MUTED: str = _DATA["muted"]
STRONG: str = _DATA["strong"]
SUBTREE: str = _DATA["subtree"]
SLACK_MAX: str = _DATA["slack_max"]
KIND_COLORS: dict[str, str] = dict(_DATA["kinds"])


def mix(a: str, b: str, t: float) -> str:
    """Linear blend of two ``#rrggbb`` colours (``colors.ts``'s ``mix``), ``t`` in [0, 1].

    >>> mix("#000000", "#ffffff", 0.5)
    '#808080'
    """
    t = min(1.0, max(0.0, t if t == t else 0.0))  # NaN -> 0
    pa, pb = int(a[1:], 16), int(b[1:], 16)
    out = 0
    for shift in (16, 8, 0):
        ca, cb = (pa >> shift) & 255, (pb >> shift) & 255
        out |= round(ca + (cb - ca) * t) << shift
    return f"#{out:06x}"


def slack_color(slack: float, max_slack: float) -> str:
    """The widget's slack colouring: strong red at zero slack, pale blue at ``max_slack``."""
    return mix(STRONG, SLACK_MAX, slack / max_slack) if max_slack > 0 else STRONG


def stream_color(stream: int | None) -> str:
    """Colour of a stream (as in the widget's timeline and stream mode)."""
    return PALETTE[int(stream) % len(PALETTE)] if stream is not None and stream >= 0 else MUTED


def buffer_color(buffer_id: int) -> str:
    """Colour of a buffer in the memory chart (as in the widget)."""
    return PALETTE[int(buffer_id) % len(PALETTE)]


def format_bytes(n: float) -> str:
    """Bytes in the unit that fits (B, KiB, MiB, GiB).

    >>> format_bytes(512), format_bytes(3 * 1024**2)
    ('512 B', '3.00 MiB')
    """
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def format_time(s: float) -> str:
    """Seconds in µs, ms or s.

    >>> format_time(2.5e-3), format_time(1.5)
    ('2.50 ms', '1.500 s')
    """
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.3f} s"


def plural(k: int, word: str, many: str | None = None) -> str:
    """``"1 stream"``, ``"3 streams"``.

    >>> plural(1, "stream"), plural(3, "stream"), plural(2, "copy", "copies")
    ('1 stream', '3 streams', '2 copies')
    """
    return f"{k:,} {word if k == 1 else (many or word + 's')}"


def printable(text: str) -> str:
    """``text`` with control characters (and other unprintables) escaped, for a terminal.

    >>> printable("a\\x1b[31mred\\nline")
    'a\\\\x1b[31mred\\\\nline'
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis.

    >>> clip("layernorm_backward", 8)
    'layerno…'
    """
    return text if len(text) <= limit else text[: limit - 1] + "…"
