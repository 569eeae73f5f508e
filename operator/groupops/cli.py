"""The `groupops` command: a thin typer app. Each command lives in `groupops.commands.<name>`
and registers itself; library errors become `Error: <what> (<where>)` with exit code 2 for bad
input and 1 for runtime failures."""

from __future__ import annotations

import typer

from groupops.commands import assign, consume, lag, pipeline, reset_offsets, snapshot
from groupops.commands import operator as operator_command

app = typer.Typer(
    name="groupops",
    help="Kafka consumer-group operations: lag-aware partition plans, stable identities, fast failover.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Kafka consumer-group operations: lag-aware partition plans, stable identities, fast failover."""


assign.register(app)
consume.register(app)
operator_command.register(app)
lag.register(app)
pipeline.register(app)
reset_offsets.register(app)
snapshot.register(app)


def main() -> None:
    app()
