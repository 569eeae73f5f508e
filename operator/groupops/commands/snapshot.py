"""`groupops snapshot`: capture offset snapshots of consumer groups, without the operator.

    groupops snapshot --bootstrap B [--group G ...] [--topic T ...] [--cluster NAME]
        --to DIR|kafka://topic|kafka://host:port/topic [--every 10s] [--count N]
        [--no-members] [--config KEY=VALUE ...] [--output table|json]

Every `--every` it reads every group (all consumer groups when no --group) through the `kafka`
lag source and appends one row per partition to the sink (groupops.pipeline.snapshot). Runs until
Ctrl-C, or `--count` rounds. Table output: one line per round; json: one JSON object per round.
Exit 2 for bad options, 1 when Kafka or the sink fails.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console

from groupops.commands.errors import RUNTIME_FAILURE, fail

__all__ = ["register", "snapshot_command"]


class SnapshotOutput(StrEnum):
    table = "table"
    json = "json"


def register(app: typer.Typer) -> None:
    app.command("snapshot")(snapshot_command)


def snapshot_command(
    *,
    bootstrap: Annotated[
        str, typer.Option("--bootstrap", "-b", help="Kafka bootstrap servers, host:port[,...].")
    ],
    to: Annotated[str, typer.Option("--to", help="A directory (Parquet dataset) or kafka://topic.")],
    groups: Annotated[
        list[str] | None,
        typer.Option("--group", "--groups", "-g", help="Group id (repeatable; default: all)."),
    ] = None,
    topics: Annotated[
        list[str] | None, typer.Option("--topic", "-t", help="Only these topics (repeatable).")
    ] = None,
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="Cluster name in rows (default: bootstrap).")
    ] = None,
    every: Annotated[str, typer.Option("--every", help="Interval between rounds.")] = "10s",
    count: Annotated[int | None, typer.Option("--count", "-n", help="Stop after N rounds.")] = None,
    members: Annotated[bool, typer.Option("--members/--no-members", help="Record partition owners.")] = True,
    config: Annotated[
        list[str] | None, typer.Option("--config", "-X", help="librdkafka property KEY=VALUE (repeatable).")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds allowed for one group's read.")] = 6.0,
    output: Annotated[
        SnapshotOutput, typer.Option("--output", "-o", help="table for people, json for machines.")
    ] = SnapshotOutput.table,
) -> None:
    """Append offset snapshots of consumer groups to Parquet or a Kafka topic."""
    from groupops.commands.lag import parse_client_config  # noqa: PLC0415
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
    client_config = parse_client_config(config or [])
    console = Console(stderr=True)
    people = output is SnapshotOutput.table

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
        fail(f"{e} (--bootstrap/--config)")
    except SnapshotError as e:
        fail(str(e), code=RUNTIME_FAILURE)
    reports = []
    try:
        reports = capture_loop(capture, sink, every_s=interval, count=count, on_tick=on_tick)
    except KeyboardInterrupt:
        pass
    except (LagSourceConfigError, UnknownTopicError) as e:
        fail(f"{e} (--group/--topic)")
    except (LagError, SnapshotError) as e:
        fail(str(e), code=RUNTIME_FAILURE)
    finally:
        capture.close()
        sink.close()
    if people and reports:
        console.print(
            f"[bold]{sum(r.rows for r in reports):,} rows in {len(reports)} round(s)[/] → {sink.describe()}"
        )
