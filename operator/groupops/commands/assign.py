"""`groupops assign`: one group in (JSON, stdin or --input), its assignment and stats out.

groupops assign [--input FILE] [--strategy S] [--output json|yaml|table]
    [--lag-from-kafka --bootstrap-server B --group G [--auto-offset-reset R]
     [--command-config FILE] [--command-property KEY=VALUE ...]]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from groupops.assign import UnknownStrategyError, get_strategy
from groupops.assign.common import collector_paused
from groupops.assign.stats import AssignmentStats, compute_stats
from groupops.commands import lag as lag_command
from groupops.commands import options
from groupops.commands.errors import fail
from groupops.commands.options import DocumentOutput
from groupops.contract import InputError, parse_group_text, render_result
from groupops.model import Assignment


def register(app: typer.Typer) -> None:
    app.command("assign")(assign_command)


def assign_command(
    *,
    input_file: Annotated[
        Path | None, typer.Option("--input", "-i", help="Group JSON file (default: standard input).")
    ] = None,
    strategy: Annotated[
        str | None, typer.Option("--strategy", "-s", help="Override the document's `strategy`.")
    ] = None,
    output_format: Annotated[
        DocumentOutput, options.output("json (default) or yaml for machines, table for people.")
    ] = DocumentOutput.json,
    lag_from_kafka: Annotated[
        bool, typer.Option("--lag-from-kafka", help="Replace `lags` with the live lag of --group.")
    ] = False,
    bootstrap: Annotated[str | None, options.bootstrap_server()] = None,
    group_id: Annotated[str | None, options.group("Consumer group whose lag to read.")] = None,
    auto_offset_reset: Annotated[
        str, typer.Option("--auto-offset-reset", help="The group's reset policy (live lag only).")
    ] = "earliest",
    command_config: Annotated[Path | None, options.command_config()] = None,
    command_property: Annotated[list[str] | None, options.command_property()] = None,
) -> None:
    """Assign one group's partitions with the chosen strategy (contract: docs/design.md §3.3)."""
    text = _read_input(input_file)
    # A million partitions come in as a million new tuples and go out as as many more: the cyclic
    # collector would walk them again and again for nothing (none is part of a cycle), so it is
    # paused for the whole command, which ends right after.
    with collector_paused(0):
        try:
            document_strategy, group = parse_group_text(text)
            if lag_from_kafka:
                group = lag_command.live_lags_for_assign(
                    group,
                    bootstrap,
                    group_id,
                    auto_offset_reset=auto_offset_reset,
                    properties=options.client_properties(command_config, command_property or []),
                )
            name = strategy or document_strategy
            assignment = get_strategy(name)(group)
        except InputError as e:
            fail(f"{e.message} ({e.field})")
        except UnknownStrategyError as e:
            fail(f"{e} ({'--strategy' if strategy else 'strategy'})")
        stats = compute_stats(group, assignment)
        if output_format is DocumentOutput.table:
            _print_table(name, assignment, stats)
        elif output_format is DocumentOutput.yaml:
            options.print_document(json.loads(render_result(assignment, stats)), output_format)
        else:
            sys.stdout.flush()
            sys.stdout.buffer.write(render_result(assignment, stats) + b"\n")
            sys.stdout.buffer.flush()


def _read_input(input_file: Path | None) -> str:
    where = "stdin" if input_file is None else f"--input {input_file}"
    try:
        data = sys.stdin.buffer.read() if input_file is None else input_file.read_bytes()
        return data.decode("utf-8")
    except OSError as e:
        fail(f"cannot read input: {e.strerror} ({where})")
    except UnicodeDecodeError:
        fail(f"input is not UTF-8 text ({where})")


def _print_table(strategy: str, assignment: Assignment, stats: AssignmentStats) -> None:
    table = Table(title=f"strategy {strategy}")
    table.add_column("member")
    table.add_column("partitions", justify="right")
    table.add_column("lag", justify="right")
    table.add_column("assignment")
    for member_id, partitions in assignment.items():
        figures = stats["members"][member_id]
        shown = ", ".join(str(tp) for tp in partitions[:12]) + (" …" if len(partitions) > 12 else "")
        table.add_row(member_id, str(figures["count"]), f"{figures['lag']:,}", shown)
    console = Console()
    console.print(table)
    console.print(
        f"max member lag {stats['max_member_lag']:,.0f}   lower bound {stats['lower_bound']:,.0f}   "
        f"imbalance {stats['imbalance']:.3f}   moves {stats['moves']}   unassigned {stats['unassigned']}"
    )
    if stats["dropped"]:
        console.print(
            f"dropped {stats['dropped']} owned partitions that no longer exist (counted in moves)",
            markup=False,
        )
    if stats["missing_topics"]:
        console.print(
            f"subscribed but not in `topics` (get nothing): {', '.join(stats['missing_topics'])}",
            markup=False,
        )
