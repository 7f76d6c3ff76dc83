"""The REST contract answered in this process (no ``--server``), on the configured database."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from api.cli.exits import EXIT_UNAVAILABLE, die, die_of
from api.cli.remote import HttpClient
from api.cli.transport import database_down
from api.settings import Settings
from estimator.errors import CommestError


class LocalClient(HttpClient):
    """The app in this process, called through FastAPI's TestClient."""

    @classmethod
    @contextmanager
    def open(cls, settings: Settings, token: str | None) -> Iterator[HttpClient]:
        """A client of the service in this process over ``settings``."""
        from sqlalchemy.exc import SQLAlchemyError

        from api.cli.transport import local_token

        try:
            with warnings.catch_warnings():
                # Starlette >= 1.x nudges towards httpx2; httpx serves the in-process client.
                warnings.filterwarnings("ignore", message=r".*httpx2", category=UserWarning)
                from fastapi.testclient import TestClient

            from api.app import create_app
        except ImportError as exc:
            die(f"the commest service is not available in this install: {exc}", EXIT_UNAVAILABLE)
        try:
            with TestClient(
                create_app(settings), base_url="http://commest.local", raise_server_exceptions=False
            ) as http:
                given = token or local_token(settings)
                if given:
                    http.headers["Authorization"] = f"Bearer {given}"
                yield cls(http, "the local service")
        except CommestError as exc:
            die_of(exc)
        except SQLAlchemyError as exc:
            raise database_down(exc) from exc
