"""When this operator process first saw each version of each consumer Lease, kept from the
moment it starts, standby included (docs/design.md §8.1).

Who calls it: the Lease watch cache's listener (`note`), from the watch thread; and the policy
handlers when a policy's memory is created (`seed`), so a standby that just became leader judges
a Lease expired as soon as it has seen it unchanged for the Lease's duration, counting the time
it watched as a standby, instead of starting a fresh duration at takeover. This is what lets a
consumer replica that died with the old leader fail over within the election Lease plus about
one second.

Sound for the same reason as `LeaseClock`: the observation is made on this process's monotonic
clock after the version was written, whether or not the process led at the time.

A Lease in heartbeat mode says nothing by its versions (its replica heartbeats to the leader
instead of writing it): `hear_heartbeat_leases` counts it as heard when this process began to
lead, the latest moment a grant of the previous leader can date from (design §7.5, rule 2).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from groupops.controller.names import LABEL_POLICY
from groupops.model import MemberId
from groupops.planner.handoff import LeaseClock
from groupops.planner.plan_format import HEARTBEAT_LIVENESS, LEASE_LIVENESS_ANNOTATION

__all__ = ["LeaseSightings", "hear_heartbeat_leases"]

_Key = tuple[str, str, str]
"""(namespace, policy, Lease name)."""


class LeaseSightings:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[_Key, tuple[str, float, float | None]] = {}

    def note(self, event_type: str, lease: Mapping[str, Any]) -> None:
        """A watch event of a consumer Lease (any thread)."""
        meta = lease.get("metadata") or {}
        policy = (meta.get("labels") or {}).get(LABEL_POLICY)
        if policy is None:
            return
        key = (str(meta.get("namespace")), str(policy), str(meta.get("name")))
        if event_type == "DELETED":
            with self._lock:
                self._seen.pop(key, None)
            return
        spec = lease.get("spec") or {}
        version = str(spec.get("renewTime") or meta.get("resourceVersion") or "")
        held = bool(spec.get("holderIdentity"))
        lifetime = float(spec["leaseDurationSeconds"]) if held and spec.get("leaseDurationSeconds") else None
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is None or seen[0] != version:
                self._seen[key] = (version, now, lifetime)

    def seed(self, clock: LeaseClock, namespace: str, policy: str) -> int:
        """Give `clock` this process's first sighting of every Lease of the policy it has no entry
        for; returns how many were given."""
        with self._lock:
            sightings = [
                (name, seen)
                for (ns, owner, name), seen in self._seen.items()
                if ns == namespace and owner == policy
            ]
        given = 0
        for name, (version, first_seen, lifetime) in sightings:
            identity = MemberId(name)
            if clock.unchanged_for(identity, first_seen) is None:
                clock.observe(identity, version, first_seen, lifetime=lifetime)
                given += 1
        return given


def hear_heartbeat_leases(clock: LeaseClock, leases: Iterable[Mapping[str, Any]], *, at: float) -> int:
    """Count every Lease in heartbeat mode among `leases` as heard at `at`, the monotonic moment
    this process began to lead; returns how many. Every grant the previous leader gave ends within
    a Lease duration of that moment (it granted only while it still led, which ended before this
    process took over), so a replica this process has not heard since is judged expired one
    duration after the takeover, however late its policy's loop starts; the grants this process
    gave are heard on the clock when it is attached to the heartbeat book."""
    heard = 0
    for lease in leases:
        meta = lease.get("metadata") or {}
        if (meta.get("annotations") or {}).get(LEASE_LIVENESS_ANNOTATION) == HEARTBEAT_LIVENESS:
            clock.hear(MemberId(str(meta.get("name"))), at)
            heard += 1
    return heard
