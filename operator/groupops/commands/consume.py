"""`groupops consume`: run one consumer replica (the container command of every consumer pod).

Settings come from the environment the operator puts in the pod (groupops.consumer.settings
lists it); each flag overrides the variable of the same meaning. The Kafka options are spelled as
the other commands spell them (`--bootstrap-server`, `--group`, `--topic`, `--command-config`,
`--command-property`; groupops.commands.options); the older `--bootstrap-servers`, `--group-id`
and `--topics` still work. SIGTERM and SIGINT stop it
gracefully: commit, release every partition, release the Lease, exit 0.
Exit codes: 2 for bad settings, 1 for a runtime failure (Kafka fatal error, the Lease taken by
another process, the processing callback raising).
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path
from typing import Annotated

import typer

from groupops.commands import options
from groupops.commands.errors import BAD_INPUT, RUNTIME_FAILURE, fail


def register(app: typer.Typer) -> None:
    app.command("consume")(consume_command)


def consume_command(
    *,
    policy: Annotated[str | None, typer.Option(help="Policy name [GROUPOPS_POLICY].")] = None,
    identity: Annotated[
        str | None, typer.Option(help="This replica's identity and group.instance.id [GROUPOPS_IDENTITY].")
    ] = None,
    namespace: Annotated[
        str | None, options.namespace("Namespace of the plan and Lease [GROUPOPS_NAMESPACE].")
    ] = None,
    group_id: Annotated[str | None, options.group("Kafka group id [GROUPOPS_GROUP_ID].")] = None,
    bootstrap_servers: Annotated[
        str | None, options.bootstrap_server("Kafka bootstrap servers [GROUPOPS_KAFKA_BOOTSTRAP_SERVERS].")
    ] = None,
    topics: Annotated[
        list[str] | None,
        options.topic(
            "Topic to subscribe to, native delivery (repeatable or comma-separated) [GROUPOPS_TOPICS]."
        ),
    ] = None,
    command_config: Annotated[Path | None, options.command_config()] = None,
    command_property: Annotated[list[str] | None, options.command_property()] = None,
    delivery: Annotated[str | None, typer.Option(help="plan or native [GROUPOPS_DELIVERY].")] = None,
    strategy: Annotated[
        str | None,
        typer.Option("--strategy", "-s", help="Kafka assignor for native delivery [GROUPOPS_STRATEGY]."),
    ] = None,
    processor: Annotated[
        str | None, typer.Option(help="module:callable that processes each message [GROUPOPS_PROCESSOR].")
    ] = None,
    record_dir: Annotated[
        Path | None, typer.Option(help="Write the processing journal here [GROUPOPS_RECORD_DIR].")
    ] = None,
    lease_duration: Annotated[
        int | None, typer.Option(help="Lease duration in seconds [GROUPOPS_LEASE_DURATION_SECONDS].")
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help="Serve Prometheus metrics on this port, 0 for none [GROUPOPS_METRICS_PORT]."),
    ] = None,
    verbose: Annotated[bool, options.verbose()] = False,
) -> None:
    """Consume the partitions the plan gives this identity (or join the group natively)."""
    from groupops.consumer import (  # noqa: PLC0415 - Kafka and Kubernetes clients load only here
        ConsumerConfigError,
        ConsumerError,
        RuntimeSettings,
        load_processor,
        make_runtime,
    )
    from groupops.kubeapi import KubeError  # noqa: PLC0415 - the Kubernetes client loads only here

    overrides = {
        "GROUPOPS_POLICY": policy,
        "GROUPOPS_IDENTITY": identity,
        "GROUPOPS_NAMESPACE": namespace,
        "GROUPOPS_GROUP_ID": group_id,
        "GROUPOPS_KAFKA_BOOTSTRAP_SERVERS": bootstrap_servers,
        "GROUPOPS_TOPICS": None if not topics else ",".join(topics),
        "GROUPOPS_DELIVERY": delivery,
        "GROUPOPS_STRATEGY": strategy,
        "GROUPOPS_PROCESSOR": processor,
        "GROUPOPS_RECORD_DIR": None if record_dir is None else str(record_dir),
        "GROUPOPS_LEASE_DURATION_SECONDS": None if lease_duration is None else str(lease_duration),
        "GROUPOPS_METRICS_PORT": None if metrics_port is None else str(metrics_port),
    }
    environment = {**os.environ, **{key: value for key, value in overrides.items() if value is not None}}
    if command_config is not None or command_property:
        environment["GROUPOPS_KAFKA_PROPERTIES"] = _kafka_properties(
            environment.get("GROUPOPS_KAFKA_PROPERTIES"),
            options.client_properties(command_config, command_property or []),
        )
    try:
        settings = RuntimeSettings.from_env(environment)
        runtime = make_runtime(settings, load_processor(settings.processor))
    except ConsumerConfigError as e:
        fail(f"{e.message} ({_flag_of(e.field)})", code=BAD_INPUT)

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format=f"%(asctime)s %(levelname)s {settings.policy}/{settings.identity} %(name)s: %(message)s",
    )
    for name in ("urllib3", "kubernetes"):
        logging.getLogger(name).setLevel(logging.WARNING)

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger(__name__).info("signal %d: releasing everything and stopping", signum)
        runtime.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        runtime.run()
    except ConsumerConfigError as e:  # the metrics port cannot be bound
        fail(f"{e.message} ({_flag_of(e.field)})", code=BAD_INPUT)
    except (ConsumerError, KubeError) as e:
        fail(str(e), code=RUNTIME_FAILURE)


_FLAGS = {
    "GROUPOPS_POLICY": "--policy",
    "GROUPOPS_IDENTITY": "--identity",
    "GROUPOPS_NAMESPACE": "--namespace",
    "GROUPOPS_GROUP_ID": "--group",
    "GROUPOPS_KAFKA_BOOTSTRAP_SERVERS": "--bootstrap-server",
    "GROUPOPS_KAFKA_PROPERTIES": "--command-property",
    "GROUPOPS_TOPICS": "--topic",
    "GROUPOPS_DELIVERY": "--delivery",
    "GROUPOPS_STRATEGY": "--strategy",
    "GROUPOPS_PROCESSOR": "--processor",
    "GROUPOPS_LEASE_DURATION_SECONDS": "--lease-duration",
    "GROUPOPS_METRICS_PORT": "--metrics-port",
}


def _flag_of(variable: str) -> str:
    flag = _FLAGS.get(variable)
    return variable if flag is None else f"{flag} or {variable}"


def _kafka_properties(from_environment: str | None, given: dict[str, str]) -> str:
    """GROUPOPS_KAFKA_PROPERTIES with the command line's properties over the environment's."""
    base: dict[str, object] = {}
    if from_environment:
        try:
            parsed = json.loads(from_environment)
        except json.JSONDecodeError as e:
            fail(f"not JSON: {e.msg} (GROUPOPS_KAFKA_PROPERTIES)")
        if not isinstance(parsed, dict):
            fail("expected a JSON object (GROUPOPS_KAFKA_PROPERTIES)")
        base = parsed
    return json.dumps({**base, **given}, separators=(",", ":"))
