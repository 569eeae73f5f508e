"""How commands report failures: one line on stderr, the exit code says whose fault it was."""

from __future__ import annotations

from typing import NoReturn

import typer

BAD_INPUT = 2
RUNTIME_FAILURE = 1


def fail(message: str, *, code: int = BAD_INPUT) -> NoReturn:
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(code)
