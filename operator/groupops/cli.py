"""The `groupops` command: a thin typer app. Each command lives in `groupops.commands.<name>`
and registers itself; the options commands share are spelled once in `groupops.commands.options`;
library errors become `Error: <what> (<where>)` with exit code 2 for bad input and 1 for runtime
failures. `groupops --version` prints the package version; `--install-completion` and
`--show-completion` set up shell completion (bash, zsh, fish, PowerShell)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

from groupops.commands import approve, assign, consume, fleet, lag, pipeline, propose, reset_offsets, snapshot
from groupops.commands import operator as operator_command
from groupops.commands.options import GroupopsGroup
from groupops.stacks import dump_stacks_on_usr1

app = typer.Typer(
    name="groupops",
    help="Kafka consumer-group operations: lag-aware partition plans, stable identities, fast failover.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    cls=GroupopsGroup,
)


def package_version() -> str:
    """The installed groupops distribution's version (pyproject.toml's)."""
    try:
        return version("groupops")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"groupops {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    *,
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Kafka consumer-group operations: lag-aware partition plans, stable identities, fast failover."""
    del show_version


approve.register(app)
assign.register(app)
consume.register(app)
fleet.register(app)
operator_command.register(app)
lag.register(app)
pipeline.register(app)
propose.register(app)
reset_offsets.register(app)
snapshot.register(app)


def main() -> None:
    dump_stacks_on_usr1()
    app()
