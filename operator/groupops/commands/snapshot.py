"""`groupops snapshot`: capture offset snapshots of consumer groups, without the operator.

    groupops snapshot --bootstrap-server B [--group G ...] [--topic T ...] [--cluster NAME]
        --to DIR|kafka://topic|kafka://host:port/topic [--every 10s] [--count N]
        [--no-members] [--command-config FILE] [--command-property KEY=VALUE ...]
        [--output table|json]

Every `--every` it reads every group (all consumer groups when no --group) through the `kafka`
lag source and appends one row per partition to the sink (groupops.pipeline.snapshot). Runs until
Ctrl-C, or `--count` rounds. Table output: one line per round; json: one JSON object per round.
Exit 2 for bad options, 1 when Kafka or the sink fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from groupops.commands import options
from groupops.commands.errors import RUNTIME_FAILURE, fail
from groupops.commands.options import BOOTSTRAP_SERVER, COMMAND_PROPERTY, GROUP, TOPIC, StreamOutput, spelled

__all__ = ["register", "snapshot_command"]


def register(app: typer.Typer) -> None:
    app.command("snapshot")(snapshot_command)


def snapshot_command(
    *,
    bootstrap: Annotated[str, options.bootstrap_server()],
    to: Annotated[str, typer.Option("--to", help="A directory (Parquet dataset) or kafka://topic.")],
    groups: Annotated[list[str] | None, options.group("Group id (repeatable; default: all).")] = None,
    topics: Annotated[list[str] | None, options.topic("Only these topics (repeatable).")] = None,
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="Cluster name in rows (default: bootstrap).")
    ] = None,
    every: Annotated[str, typer.Option("--every", help="Interval between rounds.")] = "10s",
    # -n stays from before the shared vocabulary (where -n is --namespace); snapshot has no namespace.
    count: Annotated[int | None, typer.Option("--count", "-n", help="Stop after N rounds.")] = None,
    members: Annotated[bool, typer.Option("--members/--no-members", help="Record partition owners.")] = True,
    command_config: Annotated[Path | None, options.command_config()] = None,
    command_property: Annotated[list[str] | None, options.command_property()] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds allowed for one group's read.")] = 6.0,
    output: Annotated[
        StreamOutput, options.output("table for people, json (one object per round) for machines.")
    ] = StreamOutput.table,
) -> None:
    """Append offset snapshots of consumer groups to Parquet or a Kafka topic."""
    from groupops.commands.pipeline import seconds_option  # noqa: PLC0415
    from groupops.lag import LagError, LagSourceConfigError, UnknownTopicError  # noqa: PLC0415
    from groupops.pipeline.snapshot import (  # noqa: PLC0415
        CaptureSettings,
        SnapshotCapture,
        SnapshotError,
        SnapshotTargetError,
        TickReport,
        capture_loop,
        open_sink,
    )

    interval = seconds_option(every, "--every")
    if count is not None and count <= 0:
        fail(f"must be positive, got {count} (--count)")
    client_config = options.client_properties(command_config, command_property or [])
    console = Console(stderr=True)
    people = output is StreamOutput.table

    def on_tick(report: TickReport) -> None:
        if people:
            console.print(
                f"round {report.tick + 1}: {report.groups} group(s), {report.rows} row(s), "
                f"total lag {report.total_lag:,} → {sink.describe()}"
            )
        else:
            line = {"round": report.tick + 1, "ts": report.ts, "groups": report.groups, "rows": report.rows}
            json.dump({**line, "total_lag": report.total_lag}, sys.stdout, separators=(",", ":"))
            sys.stdout.write("\n")
            sys.stdout.flush()

    try:
        sink = open_sink(to, bootstrap=bootstrap, client_config=client_config)
        capture = SnapshotCapture(
            CaptureSettings(
                bootstrap=bootstrap,
                cluster=cluster,
                groups=tuple(groups or ()),
                topics=tuple(topics or ()),
                members=members,
                timeout_s=timeout,
                client_config=client_config,
            )
        )
    except SnapshotTargetError as e:
        fail(f"{e} (--to)")
    except LagSourceConfigError as e:
        fail(f"{e} ({spelled(BOOTSTRAP_SERVER)}/{spelled(COMMAND_PROPERTY)})")
    except SnapshotError as e:
        fail(str(e), code=RUNTIME_FAILURE)
    reports = []
    try:
        reports = capture_loop(capture, sink, every_s=interval, count=count, on_tick=on_tick)
    except KeyboardInterrupt:
        pass
    except (LagSourceConfigError, UnknownTopicError) as e:
        fail(f"{e} ({spelled(GROUP)}/{spelled(TOPIC)})")
    except (LagError, SnapshotError) as e:
        fail(str(e), code=RUNTIME_FAILURE)
    finally:
        capture.close()
        sink.close()
    if people and reports:
        console.print(
            f"[bold]{sum(r.rows for r in reports):,} rows in {len(reports)} round(s)[/] → {sink.describe()}"
        )
