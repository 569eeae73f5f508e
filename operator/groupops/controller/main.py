"""Wire the operator together and run it: client, metrics, caches, leader election, handlers,
kopf. Called by `groupops operator` with settings it built from its flags.

A replica that does not lead serves `/healthz` itself (it is healthy: a standby) and keeps its
watch caches warm, so that when it takes over it reconciles from memory at once; only the leader
runs kopf's handlers. Losing leadership ends the process (exit code 3) before anything else is
written: its pod restarts as a standby (docs/design.md §8).
"""

from __future__ import annotations

import http.server
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import kopf

from groupops.controller.cache import Caches, start_caches
from groupops.controller.clusters import ClusterBook
from groupops.controller.conflicts import start_policy_claims
from groupops.controller.events import EventSink
from groupops.controller.handlers import build_registry
from groupops.controller.heartbeat_process import HeartbeatProcess, HeartbeatProcessError
from groupops.controller.heartbeats import HeartbeatBook, HeartbeatGuard, HeartbeatServer
from groupops.controller.lagfleet import KafkaClusterReaders
from groupops.controller.leader import Elector, LeaderElector, LeadershipLost
from groupops.controller.metrics import Metrics
from groupops.controller.reconcile import Deps
from groupops.controller.settings import Settings
from groupops.controller.sightings import LeaseSightings
from groupops.kubeapi import KubeClient
from groupops.lag.history import OffsetHistory

__all__ = ["HEARTBEATS_LOST_EXIT", "LEADERSHIP_LOST_EXIT", "StartupError", "run_operator"]

LEADERSHIP_LOST_EXIT = 3
HEARTBEATS_LOST_EXIT = 4

log = logging.getLogger(__name__)


class StartupError(Exception):
    """The operator cannot start: no credentials, or a port is taken. The message says which."""


def run_operator(settings: Settings, *, verbose: bool = False) -> None:
    """Block until SIGTERM/SIGINT, reconciling every policy in the watched namespaces."""
    kopf.configure(verbose=verbose, debug=verbose)
    started = time.monotonic()
    try:
        client = KubeClient.from_environment(pool_size=2 * settings.reconcile.workers)
    except Exception as e:  # the kubernetes client raises several unrelated types for a bad config
        raise StartupError(
            f"cannot load Kubernetes credentials: {e} (KUBECONFIG or the in-cluster account)"
        ) from e
    metrics = Metrics()
    network = settings.network
    if network.metrics_port:
        try:
            metrics.serve(network.host, network.metrics_port)
        except OSError as e:
            raise StartupError(
                f"cannot serve metrics: {e.strerror} (--metrics-port {network.metrics_port})"
            ) from e
    # The answering process re-imports groupops (seconds on a loaded machine): spawned now, it
    # starts while the watch caches sync.
    spawning = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spawn")
    answerer_started = spawning.submit(_start_answerer, settings, metrics)
    spawning.shutdown(wait=False)
    history = None if settings.history_topic is None else OffsetHistory(settings.history_topic)
    caches = start_caches(client, settings, metrics)  # the reconciles' reads, from watches
    claims = start_policy_claims(client, settings, metrics)  # conflicts between policies (design §6.4)
    tick = settings.reconcile.tick_seconds
    clusters = ClusterBook(client, metrics=metrics, stale_after=3 * tick + 5, learning_s=2 * tick + 5)
    clusters.start()  # ConsumerGroupClusters and their budgets (design §15)
    claims.servers_of = clusters.servers_of  # inline servers and clusterRefs meet (design §6.4)
    sightings = LeaseSightings()  # from now on, standing by or not (docs/design.md §8.1)
    caches.leases.add_listener(sightings.note)
    for lease in caches.leases.list(None):
        sightings.note("ADDED", lease)
    log.info(
        "groupops operator: %s, tick %.1fs",
        ", ".join(settings.watch.namespaces) or "cluster-wide",
        settings.reconcile.tick_seconds,
    )
    try:
        answerer = answerer_started.result()
    except HeartbeatProcessError as e:
        raise StartupError(str(e)) from e
    elector: Elector | None = None
    if settings.election is not None:
        advertise = None if settings.heartbeat is None else settings.heartbeat.advertise
        if answerer is not None:  # renewals away from the reconciles' interpreter (design §8.1)
            elector = answerer.election(settings.election, advertise)
        else:
            elector = LeaderElector(client, settings.election, advertise=advertise)
    heartbeats = _serve_heartbeats(settings, caches, elector, metrics, answerer)
    if elector is not None:
        try:
            if not _stand_by(elector, network.host, network.health_port, metrics):
                return
        except LeadershipLost as e:
            raise StartupError(f"cannot campaign for leadership: {e}") from e
        log.info("leading %.1f s after the start (term %d)", time.monotonic() - started, elector.term)
        metrics.leader_term.set(elector.term)
        elector.start_renewing(_exit_on_lost_leadership)
    else:
        metrics.leader.set(1)  # the only operator runs the reconciles (the no-leader alert's view)
    leading_since = time.monotonic()
    clusters.start_reporting()  # the fleet's status, written by the leader only
    # Lag reads mostly wait on a source; more of them in flight make bigger ListOffsets rounds (§8.4).
    lag_pool = ThreadPoolExecutor(max_workers=4 * settings.reconcile.workers, thread_name_prefix="lag")
    kafka_readers = KafkaClusterReaders(metrics)  # one AdminClient per connection (docs/design.md §8.4)
    deps = Deps(
        client=client,
        settings=settings,
        metrics=metrics,
        events=EventSink(client),
        history=history,
        caches=caches,
        sightings=sightings,
        lag_pool=lag_pool,
        leadership=elector,
        leading_since=leading_since,
        heartbeats=None if heartbeats is None else heartbeats[0],
        kafka_readers=kafka_readers,
        claims=claims,
        clusters=clusters,
    )
    try:
        kopf.run(
            registry=build_registry(deps),
            standalone=settings.watch.standalone,
            clusterwide=not settings.watch.namespaces,
            namespaces=settings.watch.namespaces,
            liveness_endpoint=f"http://{network.host}:{network.health_port}/healthz",
        )
    finally:
        lag_pool.shutdown(wait=False, cancel_futures=True)
        kafka_readers.close()
        clusters.stop()
        if elector is not None:  # before the answering process stops: it may be the one holding
            elector.release()
        if heartbeats is not None:
            heartbeats[1]()
        if history is not None:
            history.close()


def _start_answerer(settings: Settings, metrics: Metrics) -> HeartbeatProcess | None:
    """The answering process, when heartbeats are answered in one (settings.heartbeat)."""
    if settings.heartbeat is None or not settings.heartbeat.own_process:
        return None
    began = time.monotonic()
    answerer = HeartbeatProcess(
        settings.network.host,
        settings.heartbeat.port,
        metrics=metrics,
        fallback_writes_per_second=settings.heartbeat.fallback_writes_per_second,
    )
    answerer.on_lost = _exit_on_lost_heartbeats
    log.info("heartbeat answering process up in %.1f s", time.monotonic() - began)
    return answerer


def _serve_heartbeats(
    settings: Settings,
    caches: Caches,
    elector: Elector | None,
    metrics: Metrics,
    answerer: HeartbeatProcess | None,
) -> tuple[HeartbeatGuard, Callable[[], None]] | None:
    """Answer consumer heartbeats from now on, standing by or not (docs/design.md §7.5): in the
    answering process unless told otherwise. Returns the reconciles' guard and its stop."""
    if settings.heartbeat is None:
        return None
    if answerer is not None:
        answerer.mirror_leases(caches.leases.listen_from_here)
        if elector is None:  # an election of its own tells the answerer itself (design §8.1)
            answerer.start_leadership(lambda: math.inf, lambda: None)
        return answerer, answerer.stop
    host, port = settings.network.host, settings.heartbeat.port
    assert elector is None or isinstance(elector, LeaderElector)  # an answerer's election needs it
    book = HeartbeatBook(
        leases=caches.leases.get,
        leading=(lambda: True) if elector is None else elector.still_leading,
        leader_address=(lambda: None) if elector is None else (lambda: elector.leader_address),
        metrics=metrics,
        fallback_writes_per_second=settings.heartbeat.fallback_writes_per_second,
    )
    try:
        server = HeartbeatServer(book, host, port, metrics=metrics)
    except OSError as e:
        raise StartupError(f"cannot answer heartbeats: {e.strerror} (--heartbeat-port {port})") from e
    server.start()
    return book, server.stop


def _stand_by(elector: Elector, host: str, health_port: int, metrics: Metrics) -> bool:
    """Serve /healthz and campaign until leading (True) or told to stop (False)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    server = _health_server(host, health_port)
    threading.Thread(target=server.serve_forever, name="standby-health", daemon=True).start()
    metrics.leader.set(0)
    try:
        leading = elector.acquire(stop)
    finally:
        server.shutdown()
        server.server_close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if leading:
        metrics.leader.set(1)
    return leading


def _exit_on_lost_heartbeats(reason: str) -> None:
    """The answering process died or wedged: nothing grants heartbeats and no fence can be
    guarded, so this operator stops; a standby (or the restarted pod) answers instead."""
    log.critical("heartbeats: %s; exiting", reason)
    logging.shutdown()
    sys.stderr.flush()
    os._exit(HEARTBEATS_LOST_EXIT)


def _exit_on_lost_leadership(reason: str) -> None:
    log.critical("leadership lost (%s): exiting so that nothing more is written", reason)
    logging.shutdown()
    sys.stderr.flush()
    os._exit(LEADERSHIP_LOST_EXIT)


class _StandbyHealth(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 200 if self.path.startswith("/healthz") else 404
        body = b'{"standby": true}' if status == 200 else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def _health_server(host: str, port: int) -> http.server.ThreadingHTTPServer:
    try:
        return http.server.ThreadingHTTPServer((host, port), _StandbyHealth)
    except OSError as e:
        raise StartupError(f"cannot serve health checks: {e.strerror} (--health-port {port})") from e
