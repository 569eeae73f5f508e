"""When the tick's run of a policy may stop before it reads anything (docs/design.md §8.3,
"a settled policy's tick").

A full run ends *settled* when nothing it decided can change through the passing of time alone,
only through an input; `unsettled_reason` names the rule that still waits on time (None: none
does). The tick's next routine run of a settled policy (nothing woke it: a woken run never
skips) then compares, in `reconcile`, before it parses or reads anything else:

1. its inputs (`Settled.inputs`): the policy's resourceVersion (spec, annotations, status) and
   the resourceVersions of every object it owns and of every Secret the operator watches in its
   namespace, from the watch caches (`Caches.versions`, no copy, no request);
2. its lag, read as every run reads it, but for the moment it was taken (`comparable`); a
   source whose reads follow from its settings alone (`static`) is not read: with the policy's
   resourceVersion equal, its read would be the settled run's (`FIXED_SOURCE_TYPES`);
3. its replicas' progress as heartbeats report it: none far enough behind to be shown;
4. the clock: it is before `Settled.until`, the earlier of the resync period and the moment
   damping could decide otherwise on the same figures (`planner.damping.Damped.quiet_s`).

All equal, the run ends there: the full run would read the same objects and the same lag, and
no rule of it depends on anything else, so it would decide, write and report what the settled
run did, which is nothing. Any difference runs it in full, and the run settles again or not.

A policy that plans on counts (`plans_on_counts`: a Kafka assignor or failover, nothing that
reads lag to decide) compares, instead of its whole lag, the `LagShape` of the read: what its
decisions use of it (partition counts, racks, missing topics and those without series, and
which partitions are stuck in which state). Its lag figures then move without a full run: the
check keeps the lag gauges current, and the full run comes at the figures' pace
(`--status-figures-interval`) to write them to status (docs/design.md §8.3, "a busy policy that
plans on counts settles on the shape of its lag").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from groupops.controller.identities import IdentityView
from groupops.controller.spec import PolicySpec
from groupops.lag import LagSnapshot
from groupops.lag.registry import SourceContext
from groupops.model import TopicPartition
from groupops.planner.plan_format import PublishedPlan
from groupops.planner.stuck import PartitionState

__all__ = [
    "COUNT_STRATEGIES",
    "CountSettled",
    "LagShape",
    "Settled",
    "StuckShape",
    "comparable",
    "plans_on_counts",
    "shape_of",
    "unsettled_reason",
]

COUNT_STRATEGIES = frozenset({"range", "roundrobin", "sticky", "cooperative-sticky", "failover"})
"""Strategies whose target is made of partition counts, racks and membership, never of lag."""


def plans_on_counts(spec: PolicySpec) -> bool:
    """Whether nothing a run of this policy decides or shows outside its lag figures reads lag
    values: a strategy of `COUNT_STRATEGIES`, no autoscale (its count follows lag), no time-lag
    goal (status says whether it is met), no ConsumerGroupCluster (its budget and figures read
    every member policy's lag), delivery plan, no dry run."""
    return (
        spec.strategy.type in COUNT_STRATEGIES
        and spec.consumers.autoscale is None
        and spec.target_time_lag_seconds is None
        and spec.kafka.cluster_ref is None
        and spec.consumers.delivery == "plan"
        and not spec.dry_run
    )


StuckShape = frozenset[tuple[TopicPartition, PartitionState]]
"""The partitions judged stuck (`controller.lagstate.LagState.stuck`), each with its state."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LagShape:
    """What a policy that plans on counts uses of a lag read: two reads of one shape lead its
    runs to the same decisions and the same status apart from the lag figures."""

    counts: tuple[tuple[str, int], ...]
    racks: tuple[tuple[str, tuple[frozenset[str], ...]], ...]
    missing_topics: tuple[str, ...]
    topics_without_series: tuple[str, ...]
    stuck: StuckShape | None
    """None: the read has no time-lag windows (nothing is judged stuck or not)."""


def shape_of(snapshot: LagSnapshot, stuck: StuckShape | None) -> LagShape:
    return LagShape(
        counts=tuple(sorted((topic, len(lags)) for topic, lags in snapshot.lags.items())),
        racks=tuple(sorted((topic, tuple(racks)) for topic, racks in snapshot.partition_racks.items())),
        missing_topics=tuple(sorted(snapshot.missing_topics)),
        topics_without_series=tuple(sorted(snapshot.topics_without_series)),
        stuck=stuck,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CountSettled:
    """How a settled policy that plans on counts is checked: `shape` against the read's, with
    its stuck partitions judged on `owners` and `live` as the full run saw them (a change of
    either wakes the loop: a Lease event, an expiry, a publication); `members`: each identity's
    partitions, for the member gauges the check keeps current."""

    shape: LagShape
    owners: Mapping[TopicPartition, str]
    live: frozenset[str]
    members: Mapping[str, tuple[TopicPartition, ...]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Settled:
    """What a settled full run saw, kept in the policy's memory until its next full run.
    `spec`, `client_config`, `previous`, `has_plan`: what its lag read was made with (equal
    inputs give equal ones, so a skipping run reads lag the same way); `leases`: its
    identities' Lease names, whose heartbeat progress a skipping run checks; `until`: monotonic
    seconds after which the tick runs in full again."""

    inputs: tuple[object, ...]
    lag: LagSnapshot
    spec: PolicySpec
    client_config: Mapping[str, str]
    previous: PublishedPlan
    has_plan: bool
    leases: tuple[str, ...]
    until: float
    by_counts: CountSettled | None = None
    """Set for a policy that plans on counts: the check compares its shape, not `lag`."""
    reader: tuple[SourceContext, Callable[[], LagSnapshot]]
    """The lag read of `spec`, `client_config` and `previous`, built once by the full run."""


def comparable(snapshot: LagSnapshot) -> LagSnapshot:
    """The snapshot without the moment it was taken: two reads that found the same offsets and
    lags compare equal."""
    return replace(snapshot, taken_at=0.0)


def unsettled_reason(
    *,
    spec: PolicySpec,
    plan: PublishedPlan,
    published: bool,
    trigger: str | None,
    waiting: str | None,
    view: IdentityView,
    startup_grace: float,
    degraded: bool,
    time_lag_known: bool,
    total_lag: int,
    stall_handoffs: bool,
    offset_reset: bool,
) -> str | None:
    """Why a run that ended this way is not settled: the first rule found that can still change
    what a run decides or reports while its inputs stay as they are. None: settled."""
    if spec.dry_run:
        return "a dry run reports what the lag would move"
    if spec.consumers.delivery == "native":
        return "delivery native compares Kafka's own assignment at every run"
    if spec.consumers.autoscale is not None:
        return "autoscale judges its recommendations over time windows"
    if published or trigger is not None or waiting is not None:
        return "this run decided a change, or one waits"
    if plan.releasing or plan.barrier is not None or plan.lost:
        return "a handoff is in progress"
    if view.draining:
        return "a replica drains"
    if degraded:
        return "degraded: the next read may recover"
    for identity in view.identities_by_ordinal.values():
        state = view.leases.get(identity)
        if state is None or state.expired:
            return f"{identity}'s Lease ran out: its holder is fenced"
        if state.never_taken and state.silent_for < startup_grace:
            return f"{identity} is in its startup grace"
    if time_lag_known and total_lag > 0 and not plans_on_counts(spec):
        return "time lag grows while lag stands"
    if stall_handoffs:
        return "a stalled partition is kept away"
    if offset_reset:
        return "an offset reset is under way"
    return None
