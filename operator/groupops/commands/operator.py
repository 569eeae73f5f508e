"""`groupops operator`: run the ConsumerGroupPolicy operator (kopf) until SIGTERM/SIGINT."""

from __future__ import annotations

import os
import socket
import uuid
from typing import Annotated

import typer

from groupops.commands import options
from groupops.commands.errors import RUNTIME_FAILURE, fail
from groupops.controller.guard import GuardAllowlist
from groupops.controller.settings import (
    DEFAULT_FALLBACK_WRITES_PER_SECOND,
    ConsumerSettings,
    ElectionSettings,
    HeartbeatSettings,
    NetworkSettings,
    ReconcileSettings,
    Settings,
    WatchSettings,
)
from groupops.planner.handoff import DEFAULT_LEASE_DURATION_S
from groupops.planner.liveness import parse_addresses


def register(app: typer.Typer) -> None:
    app.command("operator")(operator_command)


def operator_command(
    *,
    namespace: Annotated[
        list[str] | None,
        options.namespace("Watch only this namespace (repeatable); default: the whole cluster."),
    ] = None,
    tick: Annotated[
        float,
        typer.Option(
            help="Seconds between reconciles of a policy (lag, status, rebalance interval); Lease changes "
            "and expiries wake it sooner. 5 keeps pace with about 250 busy policies (offsets moving "
            "at every read) on one core; settled ones skip their ticks (--resync).",
            min=0.2,
        ),
    ] = 5.0,
    resync: Annotated[
        float,
        typer.Option(
            help="Longest a settled policy goes without a full reconcile: a tick finds nothing changed "
            "and no rule waiting on time, and skips it (docs/design.md §8.3). A safety net: every "
            "input is compared at each tick. 0 runs every tick in full.",
            min=0.0,
        ),
    ] = 300.0,
    status_figures_interval: Annotated[
        float,
        typer.Option(
            help="Longest the lag figures in a policy's status (totalLag, maxMemberLag, imbalance, time "
            "lag) go unwritten while only they move: a busy group's move at every read "
            "(docs/design.md §8.3). Conditions, epoch and partitions are written at once; the metrics "
            "are always current. 0 writes every change.",
            min=0.0,
        ),
    ] = 30.0,
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
    leader_election: Annotated[
        bool,
        typer.Option(
            help="Campaign for the election Lease and reconcile only while leading (run two or more "
            "replicas); --no-leader-election only where one operator runs by construction."
        ),
    ] = True,
    leader_lease_seconds: Annotated[
        float,
        typer.Option(
            help="How long a silent leader keeps leadership (a standby takes over after it).", min=2.0
        ),
    ] = 5.0,
    leader_namespace: Annotated[
        str | None,
        typer.Option(
            help="Namespace of the election Lease; default $POD_NAMESPACE, else the first --namespace."
        ),
    ] = None,
    leader_lease_name: Annotated[str, typer.Option(help="Name of the election Lease.")] = "groupops-operator",
    heartbeat_port: Annotated[
        int,
        typer.Option(
            help="UDP port (on --host) where this operator answers consumer heartbeats; 0 answers none "
            "and consumers renew their Lease every second instead (one API write each).",
            min=0,
            max=65535,
        ),
    ] = 0,
    heartbeat_advertise: Annotated[
        str | None,
        typer.Option(
            help="host:port a leader tells consumers that asked a standby; default $POD_IP (else --host) "
            "with --heartbeat-port."
        ),
    ] = None,
    heartbeat_interval: Annotated[
        float | None,
        typer.Option(
            help="Seconds from a consumer's granted heartbeat to its next (default: its renew interval, "
            "1 s with Leases of 4 s and more). Longer costs the heartbeat process less and leaves a "
            "replica less margin when no operator answers; at least min(1, lease/4), under lease/2.",
            min=0.0,
        ),
    ] = None,
    fallback_writes_per_second: Annotated[
        float,
        typer.Option(
            help="Lease writes a second the consumers may send together while no operator answers "
            "their heartbeats (a leader takeover, an outage). A larger fleet spreads its writes over "
            "fleet / this seconds and its replicas pause between (docs/operations.md); 0: no limit.",
            min=0.0,
        ),
    ] = DEFAULT_FALLBACK_WRITES_PER_SECOND,
    heartbeat_process: Annotated[
        bool,
        typer.Option(
            help="Answer heartbeats in a process of their own (--no-heartbeat-process: in a thread of "
            "the operator's, which shares its interpreter with the reconciles).",
        ),
    ] = True,
    heartbeat_address: Annotated[
        list[str] | None,
        typer.Option(
            "--heartbeat-address",
            help="host:port where consumers send heartbeats first (repeatable; in a cluster the chart's "
            "Service); default the advertised address.",
        ),
    ] = None,
    allow_privileged: Annotated[
        bool,
        typer.Option(
            help="Let policies' pod templates ask for privileged containers, escalation, capabilities."
        ),
    ] = False,
    allow_run_as_root: Annotated[bool, typer.Option(help="Let pod templates run as root.")] = False,
    allow_host_namespaces: Annotated[
        bool, typer.Option(help="Let pod templates use hostNetwork, hostPID, hostIPC and hostPort.")
    ] = False,
    allow_host_path: Annotated[bool, typer.Option(help="Let pod templates mount hostPath volumes.")] = False,
    allow_volume_type: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-volume-type", help="A volume type beyond the restricted set, e.g. nfs (repeatable)."
        ),
    ] = None,
    allowed_image_registries: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-image-registries",
            help="Image prefixes pod templates may use, e.g. registry.example.com/team (repeatable; "
            "default: any).",
        ),
    ] = None,
    allow_kafka_property: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-kafka-property",
            help="A librdkafka property policies may set although the guard refuses it (repeatable).",
        ),
    ] = None,
    allowed_bootstrap_servers: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-bootstrap-servers",
            help="Brokers policies may name, host:port or *.domain:port (repeatable; default: any). "
            "Their auth Secrets' credentials go to no other broker.",
        ),
    ] = None,
    allowed_lag_source_urls: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-lag-source-urls",
            help="URL prefixes prometheus and burrow lag sources may name, e.g. "
            "http://prometheus.monitoring.svc:9090 (repeatable; default: any). Their Secrets' tokens and "
            "passwords go to no other server.",
        ),
    ] = None,
    verbose: Annotated[bool, options.verbose()] = False,
) -> None:
    """Run the operator: reconcile every ConsumerGroupPolicy it watches until stopped.

    Policies get what the guard allows (docs/design.md §13.3): the restricted Pod Security profile
    and no librdkafka property that loads code, reads the operator's files or turns verification
    off, unless the --allow-* options say otherwise; brokers limited by --allowed-bootstrap-servers,
    HTTP lag sources by --allowed-lag-source-urls."""
    from groupops.controller.main import StartupError, run_operator  # noqa: PLC0415 - kopf loads only here

    heartbeat, consumer_addresses = _heartbeats(
        port=heartbeat_port,
        advertise=heartbeat_advertise,
        addresses=heartbeat_address or [],
        host=host,
        own_process=heartbeat_process,
        fallback_writes_per_second=fallback_writes_per_second,
    )
    try:
        guard = GuardAllowlist(
            privileged=allow_privileged,
            run_as_root=allow_run_as_root,
            host_namespaces=allow_host_namespaces,
            host_path=allow_host_path,
            volume_types=tuple(allow_volume_type or ()),
            image_registries=tuple(allowed_image_registries or ()),
            kafka_properties=tuple(allow_kafka_property or ()),
            bootstrap_servers=tuple(allowed_bootstrap_servers or ()),
            lag_source_urls=tuple(allowed_lag_source_urls or ()),
        )
    except ValueError as e:
        fail(
            f"{e} (--allowed-image-registries / --allow-kafka-property / --allowed-bootstrap-servers / "
            "--allowed-lag-source-urls)"
        )
    settings = Settings(
        guard=guard,
        watch=WatchSettings(namespaces=tuple(namespace or ())),
        reconcile=ReconcileSettings(
            tick_seconds=tick,
            resync_seconds=resync,
            status_figures_seconds=status_figures_interval,
            lease_duration_seconds=lease_duration,
        ),
        consumer=_consumer_settings(consumer_image, consumer_addresses, heartbeat_interval, lease_duration),
        network=NetworkSettings(host=host, health_port=health_port, metrics_port=metrics_port),
        heartbeat=heartbeat,
        history_topic=history_topic,
        election=_election(
            enabled=leader_election,
            lease_seconds=leader_lease_seconds,
            namespace=leader_namespace,
            name=leader_lease_name,
            watched=namespace or [],
        ),
    )
    if history_topic is not None and not history_topic.strip():
        fail("the history topic is empty (--history-topic)")
    try:
        run_operator(settings, verbose=verbose)
    except StartupError as e:
        fail(str(e), code=RUNTIME_FAILURE)


def _consumer_settings(
    image: str, addresses: tuple[str, ...], heartbeat_interval: float | None, lease_seconds: int
) -> ConsumerSettings:
    try:
        settings = ConsumerSettings(
            image=image, heartbeat_addresses=addresses, heartbeat_interval_seconds=heartbeat_interval
        )
        settings.check_heartbeat_interval(lease_seconds)
    except ValueError as e:
        fail(f"{e} (--heartbeat-interval, --heartbeat-port, --lease-duration)")
    return settings


def _heartbeats(
    *,
    port: int,
    advertise: str | None,
    addresses: list[str],
    host: str,
    own_process: bool = True,
    fallback_writes_per_second: float = DEFAULT_FALLBACK_WRITES_PER_SECOND,
) -> tuple[HeartbeatSettings | None, tuple[str, ...]]:
    if port == 0:
        if advertise or addresses:
            fail("--heartbeat-advertise and --heartbeat-address need --heartbeat-port")
        return None, ()
    own = os.environ.get("POD_IP") or (host if host not in {"0.0.0.0", "::"} else "")
    if not advertise and not own:
        fail("listening on all addresses: say which one consumers reach (--heartbeat-advertise or $POD_IP)")
    try:
        advertised = advertise or f"{own}:{port}"
        settings = HeartbeatSettings(
            port=port,
            advertise=advertised,
            own_process=own_process,
            fallback_writes_per_second=fallback_writes_per_second,
        )
        consumer_addresses = tuple(a for address in addresses for a in parse_addresses(address))
    except ValueError as e:
        fail(f"heartbeats: {e}")
    return settings, consumer_addresses or (settings.advertise,)


def _election(
    *, enabled: bool, lease_seconds: float, namespace: str | None, name: str, watched: list[str]
) -> ElectionSettings | None:
    if not enabled:
        return None
    where = namespace or os.environ.get("POD_NAMESPACE") or (watched[0] if watched else "")
    if not where:
        fail("the election Lease needs a namespace (--leader-namespace, or $POD_NAMESPACE in a pod)")
    # Unique per process, never reused: a restarted operator must win the Lease anew, with a new term.
    identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}-{uuid.uuid4().hex[:8]}"
    return ElectionSettings.for_lease(
        namespace=where, name=name, identity=identity, lease_seconds=lease_seconds
    )
