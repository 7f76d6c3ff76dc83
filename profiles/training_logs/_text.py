"""Lines of a training log with the launchers' decorations removed, in linear time.

Removed: CR (CRLF files, progress bars that redraw with CR), ANSI colour codes, markdown
fences, and rank prefixes: torchrun's ``[default0]:`` / ``[rank0]:``, ``srun --label``'s
``0: ``, Open MPI's ``[1,0]<stdout>:``. Readers search lines for their markers with ``in``, so
anything else before a marker (timestamps, host names) does no harm. No pattern here can
backtrack: each is anchored and linear in the line's length, and a line longer than
``MAX_LINE_CHARS`` is skipped as noise.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

MAX_LINE_CHARS = 8192
QUOTED_LINES = 5

_ANSI = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]")
_PREFIX = re.compile(
    r"\s{0,8}(?:\[(?:default|rank)\d{1,7}\]:|\[\d{1,7},\d{1,7}\]<std(?:out|err)>:|\d{1,7}:(?=\s))"
)


class LogLines:
    """Iterates ``(line number, cleaned line)``; counts what it skipped."""

    def __init__(self, text: str) -> None:
        self._text = text
        self.too_long: list[int] = []

    def __iter__(self) -> Iterator[tuple[int, str]]:
        ansi = "\x1b" in self._text
        for number, raw in enumerate(self._text.splitlines(), 1):
            if len(raw) > MAX_LINE_CHARS:
                self.too_long.append(number)
                continue
            line = _ANSI.sub("", raw) if ansi else raw
            for _ in range(2):  # a prefix may be doubled (srun --label around torchrun --tee)
                match = _PREFIX.match(line)
                if match is None:
                    break
                line = line[match.end() :]
            stripped = line.strip()
            if not stripped or stripped.startswith(("```", "~~~")):
                continue
            yield number, line

    def warnings(self) -> list[str]:
        """What was skipped, for the answer's warnings."""
        if not self.too_long:
            return []
        shown = ", ".join(str(n) for n in self.too_long[:10])
        more = f" and {len(self.too_long) - 10} more" if len(self.too_long) > 10 else ""
        return [
            f"skipped {len(self.too_long)} line(s) longer than {MAX_LINE_CHARS} characters "
            f"as noise (line {shown}{more})"
        ]


def quote(text: str, limit: int = 160) -> str:
    """A line made safe to quote in a message: control characters replaced, length capped."""
    cleaned = "".join(ch if ch >= " " or ch == "\t" else "?" for ch in text.strip())
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 3] + "..."


def first_lines(text: str, count: int = QUOTED_LINES) -> list[tuple[int, str]]:
    """The first non-blank lines of ``text``, quoted (for an error that says what it saw)."""
    out: list[tuple[int, str]] = []
    for number, line in LogLines(text):
        out.append((number, quote(line)))
        if len(out) == count:
            break
    return out


def to_float(token: str) -> float | None:
    """A number token (``nan``/``inf`` come back as floats), or None."""
    token = token.strip()
    if not token or len(token) > 40:
        return None
    try:
        return float(token)
    except ValueError:
        return None


def to_int(token: str) -> int | None:
    """A whole-number token (``12`` or ``12.0``), or None."""
    value = to_float(token)
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return None
    if value != int(value) or abs(value) > 2**53:
        return None
    return int(value)
