"""The served process's logging, which never blocks a request.

A ``logging.StreamHandler`` writes in the thread that logs: when stderr is a pipe nobody
drains fast enough (a container log driver, a terminal scrolled back), a full pipe stops the
event loop inside an access-log line. Here every handler is a :class:`QueueingHandler`: the
record is formatted where it is logged (uvicorn's own formatters, so the lines look as usual),
put on a bounded queue without waiting, and written by one daemon thread per handler. When the
queue is full the record is dropped and counted, and the next record that fits is preceded
by a line saying how many were lost; memory stays bounded, requests never wait.

:func:`log_config` is the ``log_config`` that ``commest serve`` gives uvicorn (each worker
process applies it): uvicorn's own layout, with ``uvicorn``, ``uvicorn.access``, ``api`` and
the root logger on queueing handlers. uvicorn then applies ``--log-level`` and
``--access-log/--no-access-log`` on top of it.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import queue
import sys
import threading
from logging.handlers import QueueHandler
from typing import IO, Any, Final

from uvicorn.config import LOGGING_CONFIG

CAPACITY: Final = 10_000  # records waiting to be written, per handler
_STOP: Final = None  # tells the writing thread to end


class QueueingHandler(QueueHandler):
    """Formats a record, queues it without waiting (dropped and counted when the queue is
    full), and lets a daemon thread write it to ``stream``."""

    def __init__(self, stream: IO[str] | None = None, capacity: int = CAPACITY) -> None:
        self.records: queue.Queue[logging.LogRecord | None] = queue.Queue(capacity)
        super().__init__(self.records)
        self.target = logging.StreamHandler(stream if stream is not None else sys.stderr)
        self.dropped = 0  # since the last record that fitted (Handler.handle holds self.lock)
        self._thread = threading.Thread(target=self._write, name="commest-log", daemon=True)
        self._thread.start()

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            if self.dropped:
                self.records.put_nowait(self._dropped_notice(record))
                self.dropped = 0
            self.records.put_nowait(record)
        except queue.Full:
            self.dropped += 1

    def _dropped_notice(self, record: logging.LogRecord) -> logging.LogRecord:
        text = f"WARNING:  {self.dropped} log record(s) dropped: the log stream was too slow"
        return logging.makeLogRecord({"name": record.name, "levelno": logging.WARNING, "msg": text})

    def _write(self) -> None:
        while True:
            record = self.records.get()
            try:
                if record is _STOP:
                    return
                self.target.handle(record)
            finally:
                self.records.task_done()  # records.join(): everything queued is written

    def close(self) -> None:
        """Write what is queued (waiting at most a second for a stuck stream), then stop."""
        with contextlib.suppress(queue.Full):
            self.records.put_nowait(_STOP)
        self._thread.join(timeout=1.0)
        self.target.close()
        super().close()


def log_config(level: str = "info") -> dict[str, Any]:
    """uvicorn's logging configuration with every handler behind a queue (see module doc)."""
    config = copy.deepcopy(LOGGING_CONFIG)
    for name, handler in config["handlers"].items():
        stream = "ext://sys.stdout" if name == "access" else "ext://sys.stderr"
        config["handlers"][name] = {
            "()": f"{__name__}.QueueingHandler",
            "formatter": handler["formatter"],
            "stream": stream,
        }
    config["loggers"]["api"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    config["root"] = {"handlers": ["default"], "level": "WARNING"}
    return config
