"""The operator's settings: nested frozen dataclasses, built once (from CLI flags) and passed down.

Nothing here is read from the environment or a global by the code that uses it: the command builds
one `Settings` and hands it to `handlers.register`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from groupops.controller.guard import GuardAllowlist
from groupops.planner.handoff import DEFAULT_LEASE_DURATION_S
from groupops.planner.liveness import parse_addresses

__all__ = [
    "DEFAULT_FALLBACK_WRITES_PER_SECOND",
    "ConsumerSettings",
    "ElectionSettings",
    "HeartbeatSettings",
    "NetworkSettings",
    "ReconcileSettings",
    "Settings",
    "WatchSettings",
]

DEFAULT_FALLBACK_WRITES_PER_SECOND = 200.0
"""The Lease writes a second a fleet that lost its leader may send (docs/design.md §7.5): a fleet
of up to about 350 replicas writes as it would without a budget (a 4 s Lease's replica writes
every 1.75 s or so), one of 3,000 spreads its writes over 15 s."""


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

    tick_seconds: how often each policy is reconciled when nothing wakes it sooner (a Lease change
    or expiry does); the rebalance interval of the policy is judged at each tick, so it is the
    resolution of `rebalance.interval` and of lag in status.
    A full reconcile reads only the watch caches (no API request) and costs about 3.6 ms of
    operator CPU; a settled policy is only checked at its ticks (its inputs and lag read
    compared, in one batch with the others: the settled sweep) until something changed or
    `resync_seconds` passed. Busy groups (offsets moving at every read) run in full at every tick,
    at 20-30 ms of the main process each with a `kafka` source: one operator keeps up with about
    250-300 of them at 5 s (benchmarks/RESULTS.md "A busy fleet"; 1,000 got a run every ~40 s);
    beyond that, raise the tick. Failover, handoffs and spec changes do not wait for the tick (§8.3 of
    the design).
    workers: reconciles running at once (threads; each mostly waits on the API server).
    urgent_workers: more threads, only for the runs something woke (a Lease changed or expired, the
    spec changed; not a late lag read, which is routine news): failover and handoff steps do not
    queue behind the tick's routine runs when the operator is saturated (docs/design.md §8.3).
    retry_backoff_seconds / retry_backoff_max_seconds: the first delay after a transient failure
    (lag source down, API conflict) and its cap; the delay doubles per attempt.
    lease_duration_seconds: how long a consumer's Lease lives without renewal before the operator
    judges it expired, and so how long a crash-failover takes (the operator wakes at the expiry
    moment, not at the next tick). The runtime renews every second and stops consuming 3/4 of
    the duration after its last successful renewal, so 4 s tolerates two missed renewals and
    keeps failover within 5 s; raise it where the API server is slow to answer.
    lag_timeout_seconds: budget of one lag read.
    resync_seconds: the longest a settled policy goes without a full reconcile. A routine run (the
    tick's: nothing woke it) of a policy whose last full run left no rule waiting on time, and
    whose inputs (its objects in the watch caches, its lag, its replicas' progress) are as that
    run saw them, is skipped (`settled`, docs/design.md §8.3); every `resync_seconds`, and when
    damping could decide otherwise on the same figures, it runs in full all the same. 0 never
    skips. The resync is a safety net, not a trigger: every input is compared at each tick.
    status_figures_seconds: how stale the lag figures in a policy's status may get (totalLag,
    maxMemberLag, imbalance, timeLagSeconds, each member's lag and time lag): a run whose only
    status change is those figures does not write status if it was written less than this long
    ago, and the figures go out with the next write, at the latest this long after the last. A
    busy group's figures move at every read; written at each tick, 1,000 busy policies would be
    200 status writes a second (docs/design.md §8.3). Conditions, the epoch, members' partitions
    and a lag reaching or leaving 0 are written at once; the metrics are always current. 0 writes
    every change.
    startup_grace_seconds: how long a replica whose consumer has not started yet keeps the
    partitions the plan already gives it while other replicas run (the pods of a new policy
    start seconds apart); after that its partitions go to replicas that run.
    """

    tick_seconds: float = 5.0
    retry_backoff_seconds: float = 2.0
    retry_backoff_max_seconds: float = 60.0
    lease_duration_seconds: int = DEFAULT_LEASE_DURATION_S
    lag_timeout_seconds: float = 10.0
    startup_grace_seconds: float = 30.0
    resync_seconds: float = 300.0
    status_figures_seconds: float = 30.0
    workers: int = 16
    urgent_workers: int = 4

    def backoff(self, attempt: int) -> float:
        """Delay before retry number `attempt` (1-based): doubling from the base, capped."""
        return float(
            min(self.retry_backoff_max_seconds, self.retry_backoff_seconds * 2 ** max(0, attempt - 1))
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerSettings:
    """Defaults for consumer pods whose policy template does not say.

    image: the groupops image (same as the operator's: it contains `groupops consume`);
    command: the container command when the template gives none; heartbeat_addresses: "host:port"
    where replicas send heartbeats (docs/design.md §7.5), none to renew Leases every second;
    heartbeat_interval_seconds: seconds from a replica's granted heartbeat to its next (None: the
    replica's renew interval, a second for Leases of 4 s and more), the operator's CPU against
    the margin a replica has when the operator goes away (design §7.5, "the steady interval").
    """

    image: str = "groupops:0.1.0"
    command: tuple[str, ...] = ("groupops", "consume")
    heartbeat_addresses: tuple[str, ...] = ()
    heartbeat_interval_seconds: float | None = None

    def __post_init__(self) -> None:
        for address in self.heartbeat_addresses:
            _check_address(address, "heartbeat address")
        if self.heartbeat_interval_seconds is not None and not self.heartbeat_addresses:
            raise ValueError("a heartbeat interval needs heartbeats (a heartbeat address)")

    def check_heartbeat_interval(self, lease_seconds: int) -> None:
        """ValueError unless the interval fits a replica's Lease of `lease_seconds`: at least its
        renew interval (a quarter of the Lease, at most 1 s) and less than half of it, so that a
        grant (valid for 3/4 of the Lease) outlasts the next heartbeat by a quarter of the Lease,
        the room its retries and fallback write need."""
        interval = self.heartbeat_interval_seconds
        if interval is None:
            return
        low, high = min(1.0, lease_seconds / 4), lease_seconds / 2
        if not low <= interval < high:
            raise ValueError(
                f"heartbeat interval {interval:g} s: with a {lease_seconds} s consumer Lease it must be "
                f"at least {low:g} s and less than {high:g} s"
            )


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
class HeartbeatSettings:
    """Where this operator answers consumer heartbeats (docs/design.md §7.5): UDP `port` on
    `NetworkSettings.host`; `advertise` is the "host:port" a leader names to replicas that asked
    a standby (its pod IP in a cluster). `own_process`: answer in a process of its own
    (`controller.heartbeat_process`), not in a thread of the operator's.
    `fallback_writes_per_second`: the rate at which a fleet that lost its leader may write its
    Leases; a fleet larger than it spreads its writes (`controller.heartbeats`; 0: no spread)."""

    port: int
    advertise: str
    own_process: bool = True
    fallback_writes_per_second: float = DEFAULT_FALLBACK_WRITES_PER_SECOND

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ValueError(f"heartbeat port must be 0-65535, got {self.port}")
        if not 0 <= self.fallback_writes_per_second < math.inf:
            raise ValueError(
                f"fallback writes per second must be a number >= 0, got {self.fallback_writes_per_second}"
            )
        _check_address(self.advertise, "heartbeat advertise address")


def _check_address(address: str, what: str) -> None:
    try:
        parse_addresses(address)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectionSettings:
    """namespace/name: where the election Lease lives. identity: this replica (its pod name).
    lease_seconds: how long a silent leader keeps the Lease, and so how long a takeover waits
    after a leader dies (5 s: a standby leads about 5-6 s after the leader's node or process is
    lost; client-go's default is 15 s). renew_deadline_seconds: a leader that could not renew for
    this long stops acting (must be below lease_seconds, with margin for clock-rate drift).
    retry_seconds: campaign period, a standby's poll while its watch is not synced, and the wait
    after a renewal that failed or was skipped. renew_seconds: the leader's steady period, after
    a renewal that succeeded (one small Lease write per period; None: retry_seconds). The
    operator renews every 2 s and retries every 0.5 s (docs/design.md §8.1, "the leader renews
    every 2 s")."""

    namespace: str
    name: str = "groupops-operator"
    identity: str
    lease_seconds: float = 5.0
    renew_deadline_seconds: float = 3.5
    retry_seconds: float = 1.0
    renew_seconds: float | None = None

    def __post_init__(self) -> None:
        if not 0 < self.retry_seconds <= self.renew_period < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError(
                "leader election needs 0 < retry <= renew period < renew deadline < lease duration, "
                f"got {self.retry_seconds}, {self.renew_period}, {self.renew_deadline_seconds}, "
                f"{self.lease_seconds}"
            )

    @classmethod
    def for_lease(cls, *, namespace: str, name: str, identity: str, lease_seconds: float) -> ElectionSettings:
        """The operator's timings for a Lease of `lease_seconds` (`--leader-lease-seconds`): renew
        deadline 0.7 of it, renewals every 0.4 of it up to 2 s, retries every tenth up to 0.5 s."""
        return cls(
            namespace=namespace,
            name=name,
            identity=identity,
            lease_seconds=lease_seconds,
            renew_deadline_seconds=lease_seconds * 0.7,
            renew_seconds=min(2.0, lease_seconds * 0.4),
            retry_seconds=min(0.5, lease_seconds / 10),
        )

    @property
    def renew_period(self) -> float:
        """Seconds from a successful renewal's start to the next one's."""
        return self.retry_seconds if self.renew_seconds is None else self.renew_seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """history_topic: append every `kafka` lag read (one row per partition) to this topic on the
    cluster read, the Spark pipeline's input; None appends nothing."""

    watch: WatchSettings = field(default_factory=WatchSettings)
    reconcile: ReconcileSettings = field(default_factory=ReconcileSettings)
    consumer: ConsumerSettings = field(default_factory=ConsumerSettings)
    network: NetworkSettings = field(default_factory=NetworkSettings)
    history_topic: str | None = None
    election: ElectionSettings | None = None
    """None: no election (one operator by construction, e.g. a developer's run)."""
    heartbeat: HeartbeatSettings | None = None
    """None: replicas prove liveness by renewing their Lease every second (one API write each)."""
    guard: GuardAllowlist = field(default_factory=GuardAllowlist)
    """What policies may ask beyond the restricted defaults (controller/podguard.py)."""
