"""The root of ``commest``: global options, the verbs (loaded on use), the entry point."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from api import model_build
from api.cli.commands import VERBS
from api.cli.transport import Options

GLOBAL_OPTIONS = ("--server", "--token")


class Verbs(TyperGroup):
    """The verbs of :data:`~api.cli.commands.VERBS`, each imported when it is run or asked for."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(VERBS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        verb = VERBS.get(cmd_name)
        if verb is None:
            return None
        module = importlib.import_module(f"api.cli.commands.{verb.module}")
        command = typer.main.get_command(module.app)
        command.name = cmd_name
        return command

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The verbs and their summaries, without importing any verb."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, verb.summary) for name, verb in VERBS.items()])


app = typer.Typer(
    name="commest",
    cls=Verbs,
    help="Closed-form iteration-time and communication estimates for GPT-style training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root(
    ctx: typer.Context,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="COMMEST_SERVER",
            help="Base URL of a commest server; without it, the service runs in-process.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="COMMEST_API_TOKEN",
            help="Bearer token for writes (default: COMMEST_API_TOKEN, or the local token).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Closed-form iteration-time and communication estimates for GPT-style training."""
    ctx.obj = Options(server=server.rstrip("/") if server else None, token=token or None)


def hoist_global_options(argv: list[str]) -> list[str]:
    """Move ``--server``/``--token`` given after the verb to the front.

    Both are options of the root command, but users write them where they read naturally
    (``commest estimate --request f.json --server URL``); accept both places.
    """
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in GLOBAL_OPTIONS and i > 0:
            if "=" in arg:
                front.append(arg)
            elif i + 1 < len(argv):
                front += [arg, argv[i + 1]]
                i += 1
            else:
                rest.append(arg)  # a dangling option: let typer name the error
        else:
            rest.append(arg)
        i += 1
    return front + rest


def main() -> None:
    """The console-script entry point."""
    args = hoist_global_options(sys.argv[1:])
    if "serve" not in args:
        # A command's numpy work is scalars and short vectors, and OpenBLAS starting its thread
        # pool when numpy loads is ~0.1 s of a cold start; the server keeps its default. An
        # explicit setting wins.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        # One request validated, one answer written: build only those models' validators.
        model_build.DEFER = True
    app(args=args)
