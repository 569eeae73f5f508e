"""A Lease holder whose container the kubelet reports gone: void at once, without waiting for
silence (docs/design.md §7.5, "a holder whose container exited is void at once").

Who uses it: the consumer names its incarnation with `incarnation_for(pod_uid)`; the reconcile
(`controller/identities.py`) asks `holder_exited(lease, pod, ...)` for each identity, and fences a
holder that exited without the heartbeat guard's wait (its grants reach no process).

The rule. A container of a pod runs one instance at a time, and the kubelet reports each
instance's start (`state.running.startedAt`) and end (`state.terminated.finishedAt`, then
`lastState.terminated.finishedAt`) only once it happened, by the node's clock. Any such time B has
this property: every instance of the container that started before B had ended by B (a start
follows the previous instance's end; an end is the end of the newest instance). The process that
holds the Lease took it at `acquireTime`, by the same node's clock, while it was alive. So when the
pod the holder runs in (its UID is part of its incarnation) reports a B later than the take, the
holder's instance had ended by B: the process is gone, and with it everything it consumed.

What it trusts, and the margin:
- the container runtime ends every process of the container before the kubelet reports it ended
  (the main process is `groupops consume`, and a container's PID namespace dies with it);
- the consumer and the kubelet read one clock (the node's): `EXIT_MARGIN_S` covers the two reads
  and a runtime whose clock is a VM guest's; the API truncates B to whole seconds, which only makes
  B earlier. A process that dies within the margin of its take waits for silence, as before;
- the pod's UID, not its name: a force-deleted pod on an unreachable node may still run its
  process while a new pod of the same name starts elsewhere, so its new container says nothing
  about the old process.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from groupops.planner.plan_format import PlanFormatError, parse_micro_time

__all__ = [
    "EXIT_MARGIN_S",
    "container_boundary",
    "holder_exited",
    "incarnation_for",
    "pod_uid_of",
]

EXIT_MARGIN_S = 1.0
"""How much later than the take a container boundary must be to prove the holder gone."""

_POD_SEPARATOR = "@"


def incarnation_for(pod_uid: str | None) -> str:
    """A new process's incarnation: random, with the pod's UID after `@` when it runs in one."""
    random_part = uuid.uuid4().hex
    return f"{random_part}{_POD_SEPARATOR}{pod_uid}" if pod_uid else random_part


def pod_uid_of(incarnation: str | None) -> str | None:
    """The pod UID an incarnation names, or None (an older replica, or one outside a pod)."""
    if not incarnation or _POD_SEPARATOR not in incarnation:
        return None
    return incarnation.split(_POD_SEPARATOR, 1)[1] or None


def container_boundary(pod: Mapping[str, Any], container: str) -> float | None:
    """The latest start or end of an instance of `container` the pod's status reports, in epoch
    seconds; None when it reports none (not started yet, or a malformed time)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    status = next((s for s in statuses if isinstance(s, Mapping) and s.get("name") == container), None)
    if status is None:
        return None
    times: list[str] = []
    for key in ("state", "lastState"):
        state = status.get(key) or {}
        times.append((state.get("running") or {}).get("startedAt") or "")
        times.append((state.get("terminated") or {}).get("finishedAt") or "")
    moments: list[float] = []
    for text in times:
        if not text:
            continue
        try:
            moments.append(parse_micro_time(text))
        except PlanFormatError:
            return None  # a status we cannot read proves nothing
    return max(moments, default=None)


def holder_exited(
    lease: Mapping[str, Any] | None,
    pod: Mapping[str, Any] | None,
    *,
    container: str,
    incarnation: str | None,
) -> bool:
    """True when the process holding `lease` (`incarnation`, from its record, which the caller
    has read already) has surely ended: it runs in `pod` (by UID) and the pod reports an instance
    of `container` starting or ending `EXIT_MARGIN_S` after the take."""
    if lease is None or pod is None:
        return False
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity") or not spec.get("acquireTime"):
        return False
    uid = pod_uid_of(incarnation)
    if uid is None or uid != (pod.get("metadata") or {}).get("uid"):
        return False
    try:
        taken = parse_micro_time(str(spec["acquireTime"]))
    except PlanFormatError:
        return False
    boundary = container_boundary(pod, container)
    return boundary is not None and boundary - taken > EXIT_MARGIN_S
