"""Profiles read from a SQLite file with the standard library: a local command's hot path.

Importing SQLAlchemy costs about half a second, more than everything else a local
``commest estimate`` or ``check`` does; this module reads what those need of a stored profile
with ``sqlite3`` instead, in one read transaction:

- that the database is started as ``Runtime.start`` leaves it: at the head revision (known
  from the revision files, ``migrations.head_from_files``) with every nominal profile in it;
- the profile's row, the columns ``api.caches`` selects (:data:`SNAPSHOT_SQL`, tested to
  agree with it), made into a snapshot by the same ``api.snapshots.snapshot_from_row``.

Only a nominal profile without stored runs is answered here (``dgx-a100-nominal`` ...): its
bandwidth provider is its nominal curves, which need no query (``nominal_bandwidth``, tested
to answer as the server's provider does). For anything else (a profile with runs or of its
own, an unknown name, a database that is not started, not SQLite, or locked) the answer is
None and the caller takes the server's own path.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import migrations
from api.snapshots import SNAPSHOT_COLUMNS, MemoBandwidth, ProfileSnapshot, snapshot_from_row
from profiles.nominal import NOMINAL_SPECS, nominal_bandwidth

SQLITE_PREFIX = "sqlite:///"

#: ``api.caches``'s snapshot query, for sqlite3 (the JSON column decoded below).
SNAPSHOT_SQL = (
    "SELECT id, revision, name, gpus_per_node, peak_tflops, peak_flops_json AS by_dtype,"
    " gpu_memory_bytes, utilization, utilization_source, nominal, gpu_model,"
    " EXISTS (SELECT 1 FROM runs WHERE runs.profile_id = profiles.id) AS has_runs"
    " FROM profiles WHERE name = ?"
)


def sqlite_file(url: str) -> Path | None:
    """The file of a plain ``sqlite:///path`` URL (no driver, no query); None otherwise."""
    if not url.startswith(SQLITE_PREFIX) or "?" in url:
        return None
    path = url.removeprefix(SQLITE_PREFIX)
    return Path(path).expanduser() if path and path != ":memory:" else None


class SqliteProfiles:
    """Profiles of one SQLite file, read without SQLAlchemy (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _connect(self) -> sqlite3.Connection | None:
        if not self.path.is_file():  # never create it: starting a database is the server's
            return None
        try:
            connection = sqlite3.connect(self.path, timeout=1.0, isolation_level=None)
        except sqlite3.Error:
            return None
        return connection

    def profile(self, name: str) -> ProfileSnapshot | None:
        """The snapshot of profile ``name`` if it is answered here (see the module docstring)."""
        connection = self._connect()
        if connection is None:
            return None
        try:
            connection.execute("BEGIN")  # one snapshot of the committed data (WAL: no wait)
            if not self._started(connection):
                return None
            row = connection.execute(SNAPSHOT_SQL, (name,)).fetchone()
        except sqlite3.Error:
            return None
        finally:
            connection.close()
        if row is None or row[-1]:  # unknown (the server's path names it), or has runs
            return None
        values = dict(zip(SNAPSHOT_COLUMNS, row[:-1], strict=True))
        if not values["nominal"] or values["name"] not in NOMINAL_SPECS:
            return None  # its fallback curves depend on its GPU family: the server's path
        if isinstance(values["by_dtype"], str):
            values["by_dtype"] = json.loads(values["by_dtype"])
        fields = SimpleNamespace(**values)
        return snapshot_from_row(fields, MemoBandwidth(nominal_bandwidth(fields.name)))

    @staticmethod
    def _started(connection: sqlite3.Connection) -> bool:
        """At the head revision, with every nominal profile inserted."""
        head = migrations.head_from_files()
        versions = {row[0] for row in connection.execute("SELECT version_num FROM alembic_version")}
        if head is None or versions != {head}:
            return False
        names = sorted(NOMINAL_SPECS)
        marks = ", ".join("?" * len(names))
        query = f"SELECT count(*) FROM profiles WHERE name IN ({marks})"
        (present,) = connection.execute(query, names).fetchone()
        return bool(present == len(names))
