"""api.serverlog: logging never blocks the server, and uvicorn's lines still come out whole."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import threading

from api.serverlog import QueueingHandler, log_config

WAIT_S = 60.0  # a guard against hanging forever, not a timing assertion


class StuckStream(io.StringIO):
    """A stream whose writes wait until ``release`` is set (a pipe nobody drains)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()  # the writer is inside a write, stuck

    def write(self, text: str) -> int:
        self.entered.set()
        self.release.wait(WAIT_S)
        return super().write(text)


def test_a_stuck_stream_never_blocks_the_logger_and_drops_are_reported() -> None:
    stream = StuckStream()
    handler = QueueingHandler(stream, capacity=10)
    logger = logging.getLogger("test_serverlog.stuck")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        done = threading.Event()

        def log_a_lot() -> None:
            for i in range(1, 100):
                logger.warning("record %d", i)
            done.set()

        # The writer takes the first record and sticks in its write before the rest come, so
        # the queue never frees a slot afterwards (else a slow writer thread could take record
        # 0 after the queue had filled, and the drop count would restart after its notice).
        logger.warning("record %d", 0)
        assert stream.entered.wait(WAIT_S)

        thread = threading.Thread(target=log_a_lot)
        thread.start()
        assert done.wait(WAIT_S)  # every call returned while the stream was stuck
        thread.join(WAIT_S)
        assert handler.dropped >= 100 - 10 - 1  # the queue, and one in the writer's hands
        stream.release.set()
        handler.records.join()  # the writer caught up
        logger.warning("after")
        handler.records.join()
    finally:
        logger.removeHandler(handler)
        handler.close()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "record 0"
    assert any("log record(s) dropped" in line for line in lines)
    assert lines[-1] == "after"
    assert len(lines) < 100


def test_the_config_writes_uvicorn_api_and_access_lines() -> None:
    script = """
import logging, logging.config, sys
from api.serverlog import log_config
logging.config.dictConfig(log_config("info"))
logging.getLogger("uvicorn.error").info("server up")
logging.getLogger("api").info("api says %s", "hi")
logging.getLogger("api").debug("not at info")
logging.getLogger("uvicorn.access").info(
    '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", "/healthz", "1.1", 200
)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=WAIT_S
    )
    assert done.returncode == 0, done.stderr
    assert "INFO:     server up" in done.stderr
    assert "api says hi" in done.stderr and "not at info" not in done.stderr
    assert '127.0.0.1:5 - "GET /healthz HTTP/1.1" 200' in done.stdout


def test_every_handler_of_the_config_is_queued() -> None:
    config = log_config("debug")
    assert config["loggers"]["api"]["level"] == "DEBUG"
    assert {h["()"] for h in config["handlers"].values()} == {"api.serverlog.QueueingHandler"}
