"""Alembic environment and revisions of the profiles database (shipped inside the package).

:func:`head_from_files` names the newest revision by reading the revision files themselves
(their ``revision`` and ``down_revision`` lines, as ``script.py.mako`` writes them), without
importing Alembic: enough to tell that a database is already at head and skip Alembic (whose
import alone costs about half a second) on every start. A test checks it against Alembic.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

VERSIONS_DIR = Path(__file__).resolve().parent / "versions"

_REVISION = re.compile(r"^revision\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_DOWN_REVISION = re.compile(r"^down_revision\b[^=\n]*=(.*)$", re.MULTILINE)
_QUOTED = re.compile(r"['\"]([^'\"]+)['\"]")


@lru_cache(maxsize=1)
def head_from_files() -> str | None:
    """The one head revision of ``versions/``; None if there is not exactly one."""
    revisions: set[str] = set()
    replaced: set[str] = set()
    for path in VERSIONS_DIR.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        revision = _REVISION.search(text)
        down = _DOWN_REVISION.search(text)
        if revision is None or down is None:
            return None  # not a file this reader understands: let Alembic decide
        revisions.add(revision.group(1))
        replaced.update(_QUOTED.findall(down.group(1)))
    heads = revisions - replaced
    return heads.pop() if len(heads) == 1 else None
