"""`groupops reset-offsets`: move a policy's committed offsets while its replicas run, through the
operator (docs/design.md §9.3), with the options of `kafka-consumer-groups --reset-offsets`.

    groupops reset-offsets POLICY [-n NAMESPACE] (--to-earliest | --to-latest |
        --to-datetime TIME | --shift-by N | --to-offset N) [--topic T[:P,P...] ...]
        [--execute | --dry-run] [--timeout S] [--kubeconfig PATH] [--output table|json|yaml]

Without `--execute` (or with Kafka's `--dry-run`) it is a dry run: the operator computes the new
offsets and the table is shown; nothing is paused or written. With it, the operator releases the
partitions from their owners, commits the new offsets once none holds them, and gives them back:
every message from the new position on is processed, none by two replicas at once. The request
is the policy annotation `groupops.dev/reset-offsets`; the outcome is `status.offsetReset`
(`kubectl describe` shows it).
Exit codes: 2 for bad options, 1 when the reset failed or the operator did not answer in time.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from groupops.commands import options
from groupops.commands.errors import RUNTIME_FAILURE, fail
from groupops.commands.options import TOPIC, DocumentOutput, spelled
from groupops.controller.names import ANNOTATION_RESET_OFFSETS, API_GROUP, API_VERSION, KIND
from groupops.controller.offset_reset import FINAL_STATES, ResetRequestError, read_request
from groupops.kubeapi import KubeClient, KubeError, NotFound
from groupops.planner.plan_format import parse_rfc3339_ms

__all__ = ["register"]

_POLL_S = 0.5


def register(app: typer.Typer) -> None:
    app.command("reset-offsets")(reset_offsets_command)


def reset_offsets_command(
    policy: Annotated[str, typer.Argument(help="The ConsumerGroupPolicy whose group to reset.")],
    *,
    namespace: Annotated[str, options.namespace("The policy's namespace.")] = "default",
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="To the oldest message.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="To the end (skip everything).")] = False,
    to_datetime: Annotated[
        str | None,
        typer.Option("--to-datetime", help="To the first message at or after this RFC 3339 time."),
    ] = None,
    shift_by: Annotated[
        int | None, typer.Option("--shift-by", help="Move each committed offset by N (negative: back).")
    ] = None,
    to_offset: Annotated[int | None, typer.Option("--to-offset", help="To this offset.")] = None,
    topics: Annotated[
        list[str] | None, options.topic("TOPIC or TOPIC:P,P,... (repeatable; default: every topic).")
    ] = None,
    execute: Annotated[
        bool, typer.Option("--execute/--dry-run", help="Do it, or only show the new offsets (the default).")
    ] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the operator.")] = 120.0,
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", help="Path of a kubeconfig.")] = None,
    output: Annotated[
        DocumentOutput, options.output("table for people; json or yaml (status.offsetReset) for machines.")
    ] = DocumentOutput.table,
) -> None:
    """Reset a policy's committed offsets while it runs: pause, reset, resume (dry run by default)."""
    request = _request(to_earliest, to_latest, to_datetime, shift_by, to_offset, topics, execute)
    try:
        read_request({ANNOTATION_RESET_OFFSETS: json.dumps(request)})
    except ResetRequestError as e:
        fail(str(e))
    try:
        client = KubeClient.from_environment(kubeconfig=kubeconfig, timeout=10.0)
    except KubeError as e:
        fail(f"no Kubernetes API: {e}", code=RUNTIME_FAILURE)
    api_version = f"{API_GROUP}/{API_VERSION}"
    note = json.dumps(request, separators=(",", ":"))
    patch = {"metadata": {"annotations": {ANNOTATION_RESET_OFFSETS: note}}}
    try:
        client.patch(api_version, KIND, namespace, policy, patch)
    except NotFound:
        fail(f"no ConsumerGroupPolicy {policy!r} in namespace {namespace!r}")
    except KubeError as e:
        fail(f"cannot ask the operator: {e}", code=RUNTIME_FAILURE)
    outcome = _wait(
        client,
        api_version=api_version,
        namespace=namespace,
        policy=policy,
        request_id=request["id"],
        timeout=timeout,
    )
    if output is DocumentOutput.table:
        _show(outcome)
    else:
        options.print_document(outcome, output)
    if outcome.get("state") == "Failed":
        fail(f"offset reset {request['id']} failed: {outcome.get('message')}", code=RUNTIME_FAILURE)


def _request(  # noqa: PLR0917
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    shift_by: int | None,
    to_offset: int | None,
    topics: list[str] | None,
    execute: bool,
) -> dict[str, Any]:
    chosen = [
        name
        for name, given in (
            ("--to-earliest", to_earliest),
            ("--to-latest", to_latest),
            ("--to-datetime", to_datetime is not None),
            ("--shift-by", shift_by is not None),
            ("--to-offset", to_offset is not None),
        )
        if given
    ]
    if len(chosen) != 1:
        fail(
            "give exactly one of --to-earliest, --to-latest, --to-datetime, --shift-by, --to-offset "
            f"(got {', '.join(chosen) or 'none'})"
        )
    request: dict[str, Any] = {"id": f"r-{uuid.uuid4().hex[:10]}", "execute": execute}
    if to_earliest:
        request["to"] = "earliest"
    elif to_latest:
        request["to"] = "latest"
    elif to_datetime is not None:
        request["to"], request["value"] = "datetime", _millis(to_datetime)
    elif shift_by is not None:
        request["to"], request["value"] = "shift", shift_by
    else:
        request["to"], request["value"] = "offset", to_offset
    if topics:
        request["topics"] = _topics(topics)
    return request


def _millis(text: str) -> int:
    try:
        return parse_rfc3339_ms(text)
    except ValueError as e:
        fail(f"--to-datetime: {e}")


def _topics(values: list[str]) -> dict[str, list[int] | None]:
    topics: dict[str, list[int] | None] = {}
    for value in values:
        topic, _, listed = value.partition(":")
        if not topic:
            fail(f"{spelled(TOPIC)}: expected TOPIC or TOPIC:P,P,..., got {value!r}")
        if not listed:
            topics[topic] = None
            continue
        try:
            partitions = [int(p) for p in listed.split(",")]
        except ValueError:
            fail(f"{spelled(TOPIC)} {value}: partitions must be numbers")
        before = topics.get(topic, [])
        topics[topic] = None if before is None and topic in topics else sorted({*(before or []), *partitions})
    return topics


def _wait(
    client: KubeClient, *, api_version: str, namespace: str, policy: str, request_id: str, timeout: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            body = client.get(api_version, KIND, namespace, policy)
        except KubeError:
            body = None
        status = ((body or {}).get("status") or {}).get("offsetReset") or {}
        if status.get("id") == request_id:
            last = status
            if status.get("state") in FINAL_STATES:
                return dict(status)
        time.sleep(_POLL_S)
    where = f"state {last.get('state')}: {last.get('message')}" if last else "not picked up"
    fail(
        f"the operator did not finish offset reset {request_id} within {timeout:g} s ({where}); "
        f"the request stays on the policy and status.offsetReset will show its outcome",
        code=RUNTIME_FAILURE,
    )


def _show(outcome: dict[str, Any]) -> None:
    console = Console()
    table = Table(title=f"offset reset {outcome.get('id')} to {outcome.get('to')}: {outcome.get('state')}")
    for column in ("TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"):
        table.add_column(column, justify="left" if column == "TOPIC" else "right")
    for row in outcome.get("partitions") or []:
        topic, _, partition = str(row["partition"]).rpartition("-")
        before = row.get("before")
        table.add_row(topic, partition, "-" if before is None else str(before), str(row["after"]))
    console.print(table)
    console.print(str(outcome.get("message") or ""), markup=False)
