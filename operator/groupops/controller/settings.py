"""The operator's settings: nested frozen dataclasses, built once (from CLI flags) and passed down.

Nothing here is read from the environment or a global by the code that uses it: the command builds
one `Settings` and hands it to `handlers.register`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ConsumerSettings", "NetworkSettings", "ReconcileSettings", "Settings", "WatchSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchSettings:
    """Which policies this operator runs.

    namespaces: watch only these namespaces; empty = the whole cluster (needs the cluster-wide RBAC
    of the chart). standalone: no peering with other operator replicas (the chart runs one
    replica with a Recreate strategy, so two never reconcile one policy at once).
    """

    namespaces: tuple[str, ...] = ()
    standalone: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcileSettings:
    """Timing of reconciles, in seconds.

    tick_seconds: how often each policy's timer fires; the rebalance interval of the policy is
    judged at each tick, so it is the resolution of `rebalance.interval` and of lag in status.
    5 s keeps status fresh without loading the API server with 1,000 policies (200 reads/s).
    retry_backoff_seconds / retry_backoff_max_seconds: the first delay after a transient failure
    (lag source down, API conflict) and its cap; the delay doubles per attempt.
    lease_duration_seconds: how long a consumer's Lease lives without renewal before the operator
    judges it expired (the runtime renews every second, so 10 s tolerates a few missed renewals).
    lag_timeout_seconds: budget of one lag read.
    """

    tick_seconds: float = 5.0
    retry_backoff_seconds: float = 2.0
    retry_backoff_max_seconds: float = 60.0
    lease_duration_seconds: int = 10
    lag_timeout_seconds: float = 10.0

    def backoff(self, attempt: int) -> float:
        """Delay before retry number `attempt` (1-based): doubling from the base, capped."""
        return float(
            min(self.retry_backoff_max_seconds, self.retry_backoff_seconds * 2 ** max(0, attempt - 1))
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerSettings:
    """Defaults for consumer pods whose policy template does not say.

    image: the groupops image (same as the operator's: it contains `groupops consume`);
    command: the container command when the template gives none.
    """

    image: str = "groupops:0.1.0"
    command: tuple[str, ...] = ("groupops", "consume")


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkSettings:
    """Where the operator listens. 127.0.0.1 by default (tests, a laptop); the chart sets 0.0.0.0
    so the kubelet's probes and Prometheus reach the pod.

    health_port: kopf's liveness endpoint (`/healthz`); metrics_port: Prometheus exposition.
    """

    host: str = "127.0.0.1"
    health_port: int = 8080
    metrics_port: int = 9090


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    watch: WatchSettings = field(default_factory=WatchSettings)
    reconcile: ReconcileSettings = field(default_factory=ReconcileSettings)
    consumer: ConsumerSettings = field(default_factory=ConsumerSettings)
    network: NetworkSettings = field(default_factory=NetworkSettings)
