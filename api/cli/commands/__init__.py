"""The verbs of ``commest``, one module each; loaded only when used.

``commest --help`` lists :data:`VERBS` without importing any of them, so a verb's imports
(numpy, the schemas, rich, ...) cost nothing until that verb runs.

Adding a verb (say ``commest profile uploads``, or a new top-level ``commest timeline``):

1. If it calls the service, add the operation to ``api.cli.client.Client`` (one method, its
   docstring names the REST call), implement it in ``api.cli.remote.HttpClient`` (the HTTP
   request) and in ``api.cli.local.LocalClient`` (validate with the route's schema, call the
   service function the route calls, return ``_json(answer)``, all inside ``self.call``).
2. Write the command with Typer in a module of this package: a top-level verb is a module with
   ``app = verb_app()`` and one ``@app.command()``; a sub-verb goes into its group's module
   (``profile.py``, ``baseline.py``, ``db.py``). Import heavy things inside the function.
   Read the global options with ``options(ctx)`` (``api.cli.options``) and call the service
   inside ``with open_client(options(ctx)) as client:`` (``api.cli.transport``: refusals and
   outages exit with their line and code for you); print with ``api.cli.render`` (JSON) or
   ``api.cli.tables`` (rich, imported only for ``--format table``).
3. A new top-level verb (or group) also gets a line in :data:`VERBS`: its module and summary
   (a verb's summary is the first line of its docstring, a test checks they agree; a group
   made with :func:`verb_group` takes it from there).
4. Test it in ``tests/api/test_cli.py``, locally and against a real server (the local/remote
   agreement test takes a new case), and add it to README's CLI examples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import typer


@dataclass(frozen=True, slots=True)
class Verb:
    """A top-level verb: the module that defines it, and its one-line summary."""

    module: str  # under api.cli.commands
    summary: str  # the first line of the command's help (checked by a test)


VERBS: dict[str, Verb] = {
    "serve": Verb(
        "serve", "Apply migrations, add the nominal profiles and serve the REST API with uvicorn."
    ),
    "estimate": Verb(
        "estimate", "Estimate one iteration: POST /v1/estimates; the response JSON, or a table."
    ),
    "matrix": Verb(
        "matrix",
        "Traffic matrix (bytes per iteration, GPU or node level): POST /v1/traffic-matrices.",
    ),
    "timeline": Verb(
        "timeline",
        "Schedule of one iteration per pipeline stage: POST /v1/timelines.",
    ),
    "plan": Verb("plan", "Rank every valid layout for a GPU count: POST /v1/plans."),
    "check": Verb(
        "check", "CI gate: exit 0 when the iteration fits the budget/baseline, 1 when it does not."
    ),
    "bandwidth": Verb(
        "bandwidth",
        "Effective bus bandwidth of a collective: GET /v1/profiles/{name}/bandwidth.",
    ),
    "validate": Verb(
        "validate", "Compare the estimator against the published runs (the validation report)."
    ),
    "profile": Verb("profile", "Cluster profiles: create, list, upload benchmarks, calibrate."),
    "baseline": Verb("baseline", "Named baselines for `commest check --baseline`."),
    "db": Verb("db", "The profiles database."),
}


def verb_app(**kwargs: Any) -> typer.Typer:
    """A Typer for a verb module: plain (no rich) help, no completion options."""
    return typer.Typer(rich_markup_mode=None, add_completion=False, **kwargs)


def verb_group(name: str) -> typer.Typer:
    """The Typer of the group of sub-verbs ``name`` (``commest profile ...``), summarised as
    :data:`VERBS` says; a group even while it has only one sub-verb."""
    group = verb_app(help=VERBS[name].summary, no_args_is_help=True)

    @group.callback()
    def _group() -> None:
        pass

    return group
