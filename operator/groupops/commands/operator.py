"""`groupops operator`: run the ConsumerGroupPolicy operator (kopf) until SIGTERM/SIGINT."""

from __future__ import annotations

from typing import Annotated

import typer

from groupops.commands.errors import RUNTIME_FAILURE, fail
from groupops.controller.settings import (
    ConsumerSettings,
    NetworkSettings,
    ReconcileSettings,
    Settings,
    WatchSettings,
)
from groupops.planner.handoff import DEFAULT_LEASE_DURATION_S


def register(app: typer.Typer) -> None:
    app.command("operator")(operator_command)


def operator_command(
    *,
    namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace", "-n", help="Watch only this namespace (repeatable); default: the whole cluster."
        ),
    ] = None,
    tick: Annotated[
        float,
        typer.Option(
            help="Seconds between reconciles of a policy (lag, status, rebalance interval); Lease changes "
            "and expiries wake it sooner. About 30 from ~500 policies on (one core's worth).",
            min=0.2,
        ),
    ] = 5.0,
    lease_duration: Annotated[
        int, typer.Option(help="Seconds a consumer Lease lives without renewal.", min=1, max=3600)
    ] = DEFAULT_LEASE_DURATION_S,
    consumer_image: Annotated[str, typer.Option(help="Image of consumer pods whose template names none.")] = (
        "groupops:0.1.0"
    ),
    host: Annotated[str, typer.Option(help="Address of the health and metrics endpoints.")] = "127.0.0.1",
    health_port: Annotated[int, typer.Option(help="Port of kopf's /healthz.", min=1, max=65535)] = 8080,
    metrics_port: Annotated[
        int, typer.Option(help="Port of the Prometheus metrics; 0 serves none.", min=0, max=65535)
    ] = 9090,
    history_topic: Annotated[
        str | None,
        typer.Option(
            "--history-topic",
            help="Append every kafka lag read to this topic on the cluster read (the pipeline's input).",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at debug level.")] = False,
) -> None:
    """Run the operator: reconcile every ConsumerGroupPolicy it watches until stopped."""
    from groupops.controller.main import StartupError, run_operator  # noqa: PLC0415 - kopf loads only here

    settings = Settings(
        watch=WatchSettings(namespaces=tuple(namespace or ())),
        reconcile=ReconcileSettings(tick_seconds=tick, lease_duration_seconds=lease_duration),
        consumer=ConsumerSettings(image=consumer_image),
        network=NetworkSettings(host=host, health_port=health_port, metrics_port=metrics_port),
        history_topic=history_topic,
    )
    if history_topic is not None and not history_topic.strip():
        fail("the history topic is empty (--history-topic)")
    try:
        run_operator(settings, verbose=verbose)
    except StartupError as e:
        fail(str(e), code=RUNTIME_FAILURE)
