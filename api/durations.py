"""Durations as people read them in titles and labels."""

from __future__ import annotations


def duration_text(seconds: float) -> str:
    """``25.08 s``, ``392.1 ms`` or ``61.6 µs``: four significant figures in a unit that keeps
    them out of exponent notation (``2.508e+04 ms`` reads badly in a picture's title)."""
    if abs(seconds) >= 1.0:
        return f"{seconds:.4g} s"
    if abs(seconds) >= 1e-3:
        return f"{seconds * 1e3:.4g} ms"
    return f"{seconds * 1e6:.4g} µs"
