"""The ``commest`` command line: the service's verbs, through its REST contract only.

With ``--server URL`` every verb is an HTTP call to that server; without it the same
operations are answered in this process, against the configured database, so a local and a
remote run print the same thing. The package has three layers:

- ``client``, ``remote``, ``local``, ``transport``: a ``Client`` of the REST contract, one
  method per operation, over HTTP (``remote``) or in process without the web app (``local``,
  calling the routes' service functions); a refusal is a problem-details ``Problem``, which
  :func:`~api.cli.transport.open_client` turns into one line on stderr and an exit code
  (``exits``);
- ``render`` and ``tables``: JSON and bytes on stdout; rich tables for ``--format table``;
- ``commands``: the verbs, one module each, imported only when run (``app`` lists them).

Exit codes: 0 success, 1 a failed check, 2 bad input (usage, unreadable file, a 4xx answer),
3 the service or a dependency is unavailable (see ``exits``).
"""

from api.cli.app import app, main

__all__ = ["app", "main"]
