"""A real ``uvicorn api.app:app`` in a subprocess on a free loopback port, for tests.

``Server(db_url, data_dir, token=...)`` starts it (``start()`` waits for ``/readyz``), and it
can be stopped politely (``stop()``), killed outright (``kill()``: SIGKILL, no shutdown at all)
and started again on the same database. Its output goes to ``<data_dir>/server.log``, quoted
when it fails to start.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

START_TIMEOUT_S = 30.0


def free_port() -> int:
    """A TCP port nobody listens on right now (loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerError(RuntimeError):
    """The server did not come up."""


class Server:
    """One uvicorn process serving the commest app over ``db_url``."""

    def __init__(
        self,
        db_url: str,
        data_dir: Path,
        *,
        token: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.db_url = db_url
        self.data_dir = data_dir
        self.token = token
        self.extra_env = env or {}
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "server.log"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def start(self) -> Server:
        """Start the process and wait until ``/readyz`` answers 200."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "COMMEST_DATABASE_URL": self.db_url,
            "COMMEST_DATA_DIR": str(self.data_dir),
            "COMMEST_API_TOKEN": self.token,
            **self.extra_env,
        }
        command = [sys.executable, "-m", "uvicorn", "api.app:app"]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        with httpx.Client(base_url=self.base_url, timeout=2.0) as client:
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise ServerError("server did not start:\n" + self.log()[-3000:])
                time.sleep(0.05)

    def log(self) -> str:
        """What the server printed so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        """SIGKILL: the process ends at once, no shutdown, no cleanup."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 10 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
