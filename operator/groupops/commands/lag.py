"""`groupops lag`: a consumer group's lag per partition, read live from Kafka's Admin API.

    groupops lag --bootstrap-server B --group G [--topic T ...] [--auto-offset-reset R]
                 [--command-config FILE] [--command-property KEY=VALUE ...] [--timeout S]
                 [--output table|json|yaml]

The options are kafka-consumer-groups.sh's (`--describe --group G`), shared with the other
commands through `groupops.commands.options`. Also the live-lag helper behind
`groupops assign --lag-from-kafka` (`live_group_input`).
Exit codes: 2 for bad input (a bad option, an unknown topic, an unknown group with no topics),
1 when the cluster cannot be read (unreachable, access refused).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from groupops.commands import options
from groupops.commands.errors import RUNTIME_FAILURE, fail
from groupops.commands.options import BOOTSTRAP_SERVER, GROUP, TOPIC, DocumentOutput, spelled
from groupops.model import GroupInput

if TYPE_CHECKING:  # the Kafka client loads only when a command needs it
    from groupops.lag.kafka import GroupOffsets, KafkaLagSettings

__all__ = [
    "live_group_input",
    "live_lags_for_assign",
    "parse_client_config",
    "read_group_offsets",
    "register",
]


def register(app: typer.Typer) -> None:
    app.command("lag")(lag_command)


def lag_command(
    *,
    bootstrap: Annotated[str, options.bootstrap_server()],
    group: Annotated[str, options.group()],
    topics: Annotated[
        list[str] | None,
        options.topic("Topic to read (repeatable; default: all the group committed on)."),
    ] = None,
    auto_offset_reset: Annotated[
        str,
        typer.Option("--auto-offset-reset", help="Reset policy: decides never-committed partitions."),
    ] = "earliest",
    command_config: Annotated[Path | None, options.command_config()] = None,
    command_property: Annotated[list[str] | None, options.command_property()] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds before an unanswered read fails.")
    ] = 6.0,
    output: Annotated[DocumentOutput, options.output()] = DocumentOutput.table,
) -> None:
    """Show a consumer group's lag per partition (end offset − committed offset)."""
    properties = options.client_properties(command_config, command_property or [])
    settings = _settings(bootstrap, auto_offset_reset, properties, timeout)
    offsets = read_group_offsets(settings, group, topics or [])
    if not offsets.group_known:
        typer.echo(
            f"note: group {group!r} is unknown to the cluster: every partition follows "
            f"auto.offset.reset={settings.auto_offset_reset}",
            err=True,
        )
    if output is DocumentOutput.table:
        _print_table(offsets, settings.auto_offset_reset)
    else:
        options.print_document(_document(offsets, settings.auto_offset_reset), output)


def parse_client_config(pairs: list[str]) -> dict[str, str]:
    """`KEY=VALUE` strings → dict; bad input exits 2 naming the option as typed
    (`--command-property`, or an older spelling such as `--config`)."""
    return options.client_properties(None, pairs)


def _settings(bootstrap: str, reset: str, properties: Mapping[str, str], timeout: float) -> KafkaLagSettings:
    from groupops.lag import LagSourceConfigError  # noqa: PLC0415
    from groupops.lag.kafka import KafkaLagSettings  # noqa: PLC0415

    try:
        return KafkaLagSettings(
            bootstrap_servers=bootstrap,
            auto_offset_reset=reset,
            timeout_s=timeout,
            client_config=dict(properties),
        )
    except LagSourceConfigError as e:
        where = "/".join(
            (spelled(BOOTSTRAP_SERVER), "--auto-offset-reset", spelled(options.COMMAND_PROPERTY), "--timeout")
        )
        fail(f"{e} ({where})")


def read_group_offsets(settings: KafkaLagSettings, group: str, topics: list[str]) -> GroupOffsets:
    """Read one group's offsets; every LagError becomes the CLI's one-line error and exit code."""
    from groupops.lag import LagError, LagSourceConfigError, UnknownTopicError  # noqa: PLC0415
    from groupops.lag.kafka import KafkaLagSource, UnknownGroupError  # noqa: PLC0415

    try:
        with KafkaLagSource(settings) as source:
            return source.read_group(group, topics)
    except UnknownTopicError as e:
        fail(f"{e} ({spelled(TOPIC)})")
    except UnknownGroupError as e:
        fail(f"{e} ({spelled(GROUP)})")
    except LagSourceConfigError as e:
        fail(f"{e} ({spelled(options.COMMAND_PROPERTY)})")
    except LagError as e:
        _runtime_failure(f"{e} ({spelled(BOOTSTRAP_SERVER)} {settings.bootstrap_servers})")


def live_group_input(
    group: GroupInput,
    *,
    bootstrap: str,
    group_id: str,
    auto_offset_reset: str,
    properties: Mapping[str, str],
    timeout: float,
) -> GroupInput:
    """`group` with its `lags` (and, when the input gives none, `partition_racks`) read from
    the cluster for the input's topics. A topic whose partition count differs from the input's
    is bad input (exit 2, naming `topics.<name>`)."""
    settings = _settings(bootstrap, auto_offset_reset, properties, timeout)
    offsets = read_group_offsets(settings, group_id, sorted(group.topics))
    for topic, count in group.topics.items():
        live = offsets.partitions[topic]
        if live != count:
            fail(f"the input gives {count} partitions, the cluster has {live} (topics.{topic})")
    snapshot = offsets.snapshot(settings.auto_offset_reset)
    racks = group.partition_racks
    if not racks and any(any(per) for per in offsets.partition_racks.values()):
        racks = {topic: list(per) for topic, per in offsets.partition_racks.items()}
    return dataclasses.replace(
        group, lags={topic: list(lags) for topic, lags in snapshot.lags.items()}, partition_racks=racks
    )


def live_lags_for_assign(
    group: GroupInput,
    bootstrap: str | None,
    group_id: str | None,
    *,
    auto_offset_reset: str,
    properties: Mapping[str, str],
    timeout: float = 6.0,
) -> GroupInput:
    """`groupops assign --lag-from-kafka`: checks that --bootstrap-server and --group are given,
    then `live_group_input`."""
    if not bootstrap:
        # The parentheses keep the older spelling, which tests/unit/lag/test_kafka_source_settings.py
        # pins; the message gives the current one.
        fail("--lag-from-kafka needs the cluster's address, --bootstrap-server HOST:PORT (--bootstrap)")
    if not group_id:
        fail(f"--lag-from-kafka needs the consumer group whose lag to read ({GROUP[0]})")
    return live_group_input(
        group,
        bootstrap=bootstrap,
        group_id=group_id,
        auto_offset_reset=auto_offset_reset,
        properties=properties,
        timeout=timeout,
    )


def _runtime_failure(message: str) -> NoReturn:
    fail(message, code=RUNTIME_FAILURE)


def _rows(offsets: GroupOffsets, reset: str) -> list[dict[str, Any]]:
    from groupops.lag import lag_from_offsets  # noqa: PLC0415

    return [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "log_start": po.log_start,
            "log_end": po.log_end,
            "committed": po.committed,
            "lag": lag_from_offsets(po, reset),
        }
        for tp, po in sorted(offsets.offsets.items())
    ]


def _document(offsets: GroupOffsets, reset: str) -> dict[str, Any]:
    rows = _rows(offsets, reset)
    return {
        "group": offsets.group_id,
        "group_known": offsets.group_known,
        "group_state": offsets.group_state,
        "auto_offset_reset": reset,
        "taken_at": offsets.taken_at,
        "total_lag": sum(row["lag"] for row in rows),
        "lags": {topic: lags for topic, lags in offsets.snapshot(reset).lags.items()},
        "partitions": rows,
    }


def _print_table(offsets: GroupOffsets, reset: str) -> None:
    rows = _rows(offsets, reset)
    table = Table(title=f"group {offsets.group_id} ({offsets.group_state})")
    for name in ("topic", "partition", "log start", "log end", "committed", "lag"):
        table.add_column(name, justify="left" if name == "topic" else "right")
    for row in rows:
        committed = "-" if row["committed"] is None else f"{row['committed']:,}"
        table.add_row(
            row["topic"],
            str(row["partition"]),
            f"{row['log_start']:,}",
            f"{row['log_end']:,}",
            committed,
            f"{row['lag']:,}",
        )
    console = Console()
    console.print(table)
    console.print(f"total lag {sum(row['lag'] for row in rows):,}   auto.offset.reset={reset}")
