"""Plain output: JSON documents and bytes on stdout (no rich here; tables are in ``tables``)."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer


def emit_json(value: Any) -> None:
    """``value`` as indented JSON on stdout."""
    typer.echo(json.dumps(value, indent=2, sort_keys=False))


def emit_bytes(content: bytes) -> None:
    """``content`` as is on stdout (CSV, PNG ...)."""
    sys.stdout.flush()
    stream = getattr(sys.stdout, "buffer", None)
    if stream is not None:
        stream.write(content)
        stream.flush()
    else:
        sys.stdout.write(content.decode("utf-8", errors="replace"))
