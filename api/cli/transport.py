"""Where a command's calls go: the global options, and the client they name.

:func:`open_client` gives the verbs a :class:`~api.cli.client.Client`: over HTTP with
``--server URL`` (authenticated with ``--token``, else the local token file), in this process
without it; inside it, a refusal (:class:`~api.cli.client.Problem`) or an outage
(:class:`~api.cli.client.Unreachable`) ends the command with its one line and exit code: one
mapping for a remote and a local answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from api.cli.client import Client, Problem, Unreachable
from api.cli.exits import EXIT_BAD_INPUT, EXIT_UNAVAILABLE, die, exit_code_for_status

if TYPE_CHECKING:
    from api.settings import Settings


@dataclass
class Options:
    """The global options: where the service is and the token for writes."""

    server: str | None = None
    token: str | None = None


def load_settings() -> Settings:
    """The process settings; exit 2 naming the COMMEST_* variable that is wrong."""
    from pydantic import ValidationError as SettingsError

    from api.settings import get_settings

    try:
        return get_settings()
    except SettingsError as exc:
        first = exc.errors()[0]
        name = "COMMEST_" + "_".join(str(p) for p in first["loc"]).upper()
        die(f"{name}={first.get('input')!r}: {first['msg']}", EXIT_BAD_INPUT)


def local_token(settings: Settings) -> str | None:
    """The write token of the local service: COMMEST_API_TOKEN, else ``<data_dir>/api-token``.

    Never creates one: a client that has none sends none (and a write is refused).
    """
    from api.tokens import read_token

    return read_token(settings)


@contextmanager
def open_client(options: Options) -> Iterator[Client]:
    """The client the options name; a refusal or an outage inside ends the command.

    ``--server URL``: HTTP, with ``--token`` or else the local token file (a server on this
    machine made it); no ``--server``: the service in this process.
    """
    try:
        if options.server:
            from api.cli.remote import HttpClient, server_url_problem

            wrong = server_url_problem(options.server)
            if wrong is not None:  # a bad flag (exit 2), not an unreachable server (exit 3)
                die(
                    f"--server {options.server!r}: {wrong}; give the base URL of a commest "
                    "server, e.g. http://127.0.0.1:8000",
                    EXIT_BAD_INPUT,
                )
            token_file = None
            token = options.token
            if not token:
                from api.tokens import token_path

                settings = load_settings()
                token, token_file = local_token(settings), token_path(settings)
            with HttpClient.connect(options.server, token, token_file=token_file) as client:
                yield client
        else:
            from api.cli.local import LocalClient

            with LocalClient.open(load_settings(), options.token) as local:
                yield local
    except Problem as problem:
        die(problem.line(), exit_code_for_status(problem.status))
    except Unreachable as exc:
        die(str(exc), EXIT_UNAVAILABLE)
