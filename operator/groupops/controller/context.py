"""What one reconcile run carries: its dependencies, the memory kept per policy between runs,
the run's context (policy, body, clock, logger), and the failure that ends a run.

Shared by the reconcile's modules: `reconcile` (the named steps), `decide` (the plan decision)
and `report` (status, conditions, Events).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from groupops.controller.cache import Caches, Reader
from groupops.controller.events import EventSink
from groupops.controller.heartbeats import HeartbeatGuard
from groupops.controller.lagfleet import KafkaClusterReaders
from groupops.controller.lagread import PolicyLag
from groupops.controller.metrics import Metrics
from groupops.controller.render_common import PolicyRef
from groupops.controller.settings import Settings
from groupops.controller.settled import Settled
from groupops.controller.sightings import LeaseSightings
from groupops.controller.wakeup import Wakeup
from groupops.kubeapi import KubeClient
from groupops.lag.history import OffsetHistory
from groupops.model import TopicPartition
from groupops.planner.damping import DampingMemory
from groupops.planner.handoff import LeaseClock
from groupops.planner.target import TargetMemo

if TYPE_CHECKING:  # conflicts.py reports through report.py, which imports this module
    from groupops.controller.clusters import ClusterBook
    from groupops.controller.conflicts import PolicyClaims

__all__ = [
    "Deps",
    "Leadership",
    "PolicyLog",
    "PolicyMemory",
    "ReconcileFailure",
    "ReconcileResult",
    "RunContext",
    "iso",
]


class Leadership(Protocol):
    """What the reconcile needs of the election (`controller.leader.LeaderElector`)."""

    @property
    def identity(self) -> str: ...

    @property
    def term(self) -> int: ...

    def still_leading(self) -> bool: ...


class ReconcileFailure(Exception):
    """The run could not finish. `reason` is the condition reason; `transient` says retry."""

    def __init__(self, reason: str, message: str, *, transient: bool) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.transient = transient


@dataclass
class PolicyMemory:
    """What the operator keeps between runs of one policy (lost on restart, by design)."""

    clock: LeaseClock = field(default_factory=LeaseClock)
    lock: threading.Lock = field(default_factory=threading.Lock)
    wakeup: Wakeup = field(default_factory=Wakeup)
    failures: int = 0
    """Transient failures in a row of the policy's loop (its retry delay doubles with each)."""
    lag: PolicyLag = field(default_factory=PolicyLag)
    """The policy's lag reads, off the reconcile's path (`lagread`), and its time-lag windows."""
    stuck_announced: dict[TopicPartition, str] | None = None
    """Each stuck partition's state as its last Event announced it (`lagstate`); None before the
    first judgement, which starts from status.stuckPartitions (a new leader repeats nothing)."""
    stall_handoffs: dict[TopicPartition, tuple[float, str]] = field(default_factory=dict)
    """Stalled partitions kept away from the replica they stalled on, with the start of that
    standstill and the replica, until the standstill ends (`lagstate.hand_off_stalled`)."""
    poke: Callable[[], None] = lambda: None
    """Wake the policy's loop from any thread (set by its daemon)."""
    lag_landed: Callable[[], None] = lambda: None
    """Ask the policy's loop, from any thread, for a routine run at once: a lag read landed after
    its run stopped waiting (set by its daemon; `Wakeup.note_lag_landed`)."""
    pipeline_plan_refused: str | None = None
    """The id of the pipeline plan a Warning Event last refused (one Event per plan)."""
    damping: DampingMemory = field(default_factory=DampingMemory)
    """The hysteresis, interval and autoscale history of damping (`decide`, planner/damping.py)."""
    targets: TargetMemo = field(default_factory=TargetMemo)
    """The last planning round's target and figures, for a round that asks the same (`decide`)."""
    settled: Settled | None = None
    """What the last full run saw when it ended settled (`settled`); None: the tick runs in full.
    Set and cleared by the policy's runs, read by its settled checks (`handlers.SettledSweep`)."""
    accounts_applied: tuple[object, ...] | None = None
    """What the last account apply depended on (`reconcile._account_basis`); a run that finds the
    same skips the apply. None: apply."""
    status_written_at: float | None = None
    """When a run last wrote the policy's status (monotonic); None: not since this process leads."""
    own_status_write: tuple[str, str] | None = None
    """The current run's status writes: the policy's resourceVersion as the run read it, and the
    one its last status write returned, when that write changed nothing else (`report`); None:
    it wrote none, or something else changed. The settled record counts the policy as unchanged
    by it (reconcile `_settled_after`)."""
    figures_due: float | None = None
    """When lag figures a run held back are written at the latest (monotonic; report.py); None:
    status shows the newest figures."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Deps:
    client: KubeClient
    settings: Settings
    metrics: Metrics
    events: EventSink
    wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    history: OffsetHistory | None = None
    caches: Caches | None = None
    """The operator's watch caches; None reads everything from the API (unit tests, tools)."""
    sightings: LeaseSightings | None = None
    """When this process first saw each consumer Lease version, standby time included."""
    lag_pool: Executor | None = None
    """Where lag reads run; None reads in the reconcile itself (tools, unit tests)."""
    leadership: Leadership | None = None
    """The election this operator won; None when it runs without one (one operator by
    construction). Every plan write checks it and records its term."""
    leading_since: float | None = None
    """The monotonic moment this process began to lead (None: unknown; tools and unit tests take
    a policy's first run instead)."""
    heartbeats: HeartbeatGuard | None = None
    """Consumer heartbeats this operator answers (docs/design.md §7.5); None: Leases only."""
    kafka_readers: KafkaClusterReaders | None = None
    """One reader per Kafka connection for `kafka` lag sources (docs/design.md §8.4); None: a
    client per read (tools, unit tests)."""
    claims: PolicyClaims | None = None
    """Every watched policy's claim on a consumer group (`conflicts`, docs/design.md §6.4); None:
    no conflict check (tools, unit tests of one policy)."""
    clusters: ClusterBook | None = None
    """Every ConsumerGroupCluster, its disruption budget and fleet figures (`clusters`,
    docs/design.md §15); None: a policy naming a cluster is refused (tools, unit tests)."""

    @property
    def reader(self) -> Reader:
        """Where the reconcile reads the objects a policy owns and its auth Secret."""
        return self.caches if self.caches is not None else self.client


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcileResult:
    epoch: int
    published: bool
    trigger: str | None
    status_written: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class RunContext:
    """Everything one run knows, passed between its steps."""

    policy: PolicyRef
    body: Mapping[str, Any]
    deps: Deps
    memory: PolicyMemory
    now: datetime
    log: PolicyLog

    @property
    def status(self) -> Mapping[str, Any]:
        return self.body.get("status") or {}

    def event(self, kind: str, reason: str, message: str) -> None:
        self.deps.events.post(self.policy, kind=kind, reason=reason, message=message, now=self.now)


class PolicyLog(logging.LoggerAdapter[logging.Logger]):
    """Every line of a run starts with the policy and its group, whatever the log format."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        extra = self.extra or {}
        return f"[{extra.get('policy')} group={extra.get('group')}] {msg}", kwargs


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
