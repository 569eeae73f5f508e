"""When the tick's run of a policy may stop before it reads anything (docs/design.md §8.3,
"a settled policy's tick").

A full run ends *settled* when nothing it decided can change through the passing of time alone,
only through an input; `unsettled_reason` names the rule that still waits on time (None: none
does). The tick's next routine run of a settled policy (nothing woke it: a woken run never
skips) then compares, in `reconcile`, before it parses or reads anything else:

1. its inputs (`Settled.inputs`): the policy's resourceVersion (spec, annotations, status) and
   the resourceVersions of every object it owns and of every Secret the operator watches in its
   namespace, from the watch caches (`Caches.versions`, no copy, no request);
2. its lag, read as every run reads it, but for the moment it was taken (`comparable`);
3. its replicas' progress as heartbeats report it: none far enough behind to be shown;
4. the clock: it is before `Settled.until`, the earlier of the resync period and the moment
   damping could decide otherwise on the same figures (`planner.damping.Damped.quiet_s`).

All equal, the run ends there: the full run would read the same objects and the same lag, and
no rule of it depends on anything else, so it would decide, write and report what the settled
run did, which is nothing. Any difference runs it in full, and the run settles again or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from groupops.controller.identities import IdentityView
from groupops.controller.spec import PolicySpec
from groupops.lag import LagSnapshot
from groupops.planner.plan_format import PublishedPlan

__all__ = ["Settled", "comparable", "unsettled_reason"]


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
    if time_lag_known and total_lag > 0:
        return "time lag grows while lag stands"
    if stall_handoffs:
        return "a stalled partition is kept away"
    if offset_reset:
        return "an offset reset is under way"
    return None
