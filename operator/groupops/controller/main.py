"""Wire the operator together and run it: client, metrics, handlers, kopf. Called by
`groupops operator` with settings it built from its flags."""

from __future__ import annotations

import logging

import kopf

from groupops.controller.events import EventSink
from groupops.controller.handlers import build_registry
from groupops.controller.kube import KubeClient
from groupops.controller.metrics import Metrics
from groupops.controller.reconcile import Deps
from groupops.controller.settings import Settings
from groupops.lag.history import OffsetHistory

__all__ = ["StartupError", "run_operator"]

log = logging.getLogger(__name__)


class StartupError(Exception):
    """The operator cannot start: no credentials, or a port is taken. The message says which."""


def run_operator(settings: Settings, *, verbose: bool = False) -> None:
    """Block until SIGTERM/SIGINT, reconciling every policy in the watched namespaces."""
    kopf.configure(verbose=verbose, debug=verbose)
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
    history = None if settings.history_topic is None else OffsetHistory(settings.history_topic)
    deps = Deps(client=client, settings=settings, metrics=metrics, events=EventSink(client), history=history)
    log.info(
        "groupops operator: %s, tick %.1fs",
        ", ".join(settings.watch.namespaces) or "cluster-wide",
        settings.reconcile.tick_seconds,
    )
    kopf.run(
        registry=build_registry(deps),
        standalone=settings.watch.standalone,
        clusterwide=not settings.watch.namespaces,
        namespaces=settings.watch.namespaces,
        liveness_endpoint=f"http://{network.host}:{network.health_port}/healthz",
    )
    if history is not None:
        history.close()
