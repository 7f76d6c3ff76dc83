"""A write transaction held open in a thread, to show what readers do meanwhile (test helper).

``held_write(begin, write)`` enters ``begin()`` (a write unit of work) in a thread, calls
``write(session)``, flushes, and keeps the transaction open until the ``with`` block ends;
then it commits. ``assert_sqlite_write_locked(path)`` proves that someone holds the write lock
of a SQLite file (``BEGIN IMMEDIATE`` with no busy wait fails with "database is locked").
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from sqlalchemy.orm import Session

WAIT_S = 60.0  # a guard against hanging forever, not a timing assertion


@contextmanager
def held_write(
    begin: Callable[[], AbstractContextManager[Session]], write: Callable[[Session], None]
) -> Iterator[None]:
    """Inside the block, ``write`` is flushed in a transaction that is still open."""
    holding, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            with begin() as session:
                write(session)
                session.flush()
                holding.set()
                release.wait(WAIT_S)
        except BaseException as exc:  # reported in the test's thread
            failures.append(exc)
            holding.set()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert holding.wait(WAIT_S) and not failures, failures
        yield
    finally:
        release.set()
        thread.join(WAIT_S)
    assert not thread.is_alive() and not failures, failures


def assert_sqlite_write_locked(path: str) -> None:
    """Someone holds the write lock of the SQLite file at ``path``."""
    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc), exc
    else:
        probe.execute("ROLLBACK")
        raise AssertionError(f"nobody holds the write lock of {path}")
    finally:
        probe.close()
