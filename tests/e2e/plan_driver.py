"""The operator's publish step, in a test thread: the stand-in used by the consumer-runtime
integration tests and the failover benchmark (the e2e tests run the real operator).

Each step does exactly what the operator's publish step must do (see the report of issue 5):
1. read the plan ConfigMap (`plan_from_configmap`; none yet: `empty_plan`) and every Lease;
2. `LeaseClock.observe` each Lease's resourceVersion; an identity is live when its Lease is held
   and changed within the lease duration by this clock; judged expired when held and silent
   longer, or not held at all (never taken, or released on exit);
3. `identities_to_fence` -> fence each with a compare-and-swap merge patch of
   `fence_annotations(epoch)` carrying the resourceVersion just read; a conflict means alive;
4. `next_plan(previous, target(live), states, expired=fenced)`; when `changed`, write the
   ConfigMap (`render_plan_configmap`) with compare-and-swap.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from groupops.assign import get_strategy
from groupops.devstack.kube_api import ApiError, KubeApi
from groupops.model import AssignOptions, GroupInput, Member, MemberId, TopicPartition
from groupops.planner.handoff import LeaseClock, MemberState, identities_to_fence, next_plan
from groupops.planner.plan_format import (
    LeaseRecord,
    LeaseState,
    PublishedPlan,
    empty_plan,
    fence_annotations,
    lease_record,
    plan_from_configmap,
    render_plan_configmap,
)
from groupops.planner.wire import lease_name, plan_configmap_name

Target = Callable[[Sequence[str]], Mapping[str, Sequence[TopicPartition]]]
"""live identities (sorted) -> the target assignment (every identity that takes part)."""


def engine_target(
    strategy: str,
    topics: Mapping[str, int],
    *,
    priorities: Mapping[str, int] | None = None,
    failback: bool = True,
) -> Target:
    """The target the engine computes for the live identities (static members)."""

    def target(live: Sequence[str]) -> dict[str, list[TopicPartition]]:
        members = tuple(
            Member(
                member_id=MemberId(identity),
                group_instance_id=identity,
                topics=frozenset(topics),
                priority=(priorities or {}).get(identity, 0),
            )
            for identity in live
        )
        group = GroupInput(topics=dict(topics), members=members, options=AssignOptions(failback=failback))
        return {str(k): v for k, v in get_strategy(strategy)(group).items()} if members else {}

    return target


@dataclass
class Publication:
    at: float
    epoch: int
    assignment: dict[str, tuple[TopicPartition, ...]]
    waiting: dict[TopicPartition, str]


@dataclass
class PlanDriver:
    """Publishes plans for `identities` towards `target` every `period` seconds in a thread."""

    api: KubeApi
    namespace: str
    policy: str
    identities: list[str]
    target: Target
    lease_seconds: int
    strategy: str = "test"
    period: float = 0.2
    publications: list[Publication] = field(default_factory=list)
    fences: list[tuple[float, str, int]] = field(default_factory=list)
    _clock: LeaseClock = field(default_factory=LeaseClock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    errors: list[str] = field(default_factory=list)

    def create_leases(self) -> None:
        """Unheld Leases for every identity, as the operator creates them."""
        for identity in self.identities:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": lease_name(self.policy, identity),
                    "labels": {"groupops.dev/policy": self.policy},
                },
                "spec": {"leaseDurationSeconds": self.lease_seconds},
            }
            try:
                self.api.create("Lease", self.namespace, body)
            except ApiError as e:
                if e.status != 409:
                    raise

    def start(self) -> PlanDriver:
        self._stop.clear()
        self._clock = LeaseClock()  # a (re)started operator knows nothing of what it saw before
        self._thread = threading.Thread(target=self._run, name="plan-driver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def restart(self) -> None:
        self.stop()
        self.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except (ApiError, OSError) as e:
                self.errors.append(str(e))
            self._stop.wait(self.period)

    def current(self) -> PublishedPlan:
        configmap = self.api.get("ConfigMap", self.namespace, plan_configmap_name(self.policy))
        if configmap is None:
            return empty_plan(self.strategy)
        return plan_from_configmap(configmap.get("data") or {}, configmap["metadata"].get("annotations"))

    def step(self) -> None:
        configmap = self.api.get("ConfigMap", self.namespace, plan_configmap_name(self.policy))
        previous = (
            empty_plan(self.strategy)
            if configmap is None
            else plan_from_configmap(configmap.get("data") or {}, configmap["metadata"].get("annotations"))
        )
        known = set(self.identities) | {str(i) for i in previous.plan.assignment}
        known |= {str(r.identity) for r in previous.releasing.values()}
        now = time.monotonic()
        leases: dict[str, dict[str, Any] | None] = {
            identity: self.api.get("Lease", self.namespace, lease_name(self.policy, identity))
            for identity in known
        }
        states: dict[MemberId, MemberState] = {}
        live: list[str] = []
        judged: list[MemberId] = []
        for identity, lease in sorted(leases.items()):
            record = LeaseRecord() if lease is None else lease_record(lease["metadata"].get("annotations"))
            states[MemberId(identity)] = MemberState.from_record(record)
            version = None if lease is None else str(lease["metadata"]["resourceVersion"])
            self._clock.observe(MemberId(identity), version, now)
            held = lease is not None and bool((lease.get("spec") or {}).get("holderIdentity"))
            duration = float(
                ((lease or {}).get("spec") or {}).get("leaseDurationSeconds") or self.lease_seconds
            )
            expired = self._clock.expired(MemberId(identity), now, duration)
            if held and not expired and record.state is not LeaseState.RELEASED:
                if identity in self.identities:
                    live.append(identity)
            elif not held or expired:
                judged.append(MemberId(identity))
        fenced: list[MemberId] = []
        for identity in identities_to_fence(previous, states, judged):
            lease = leases.get(str(identity))
            if lease is None:
                continue
            try:
                patched = self.api.patch(
                    "Lease",
                    self.namespace,
                    lease["metadata"]["name"],
                    {
                        "metadata": {
                            "resourceVersion": lease["metadata"]["resourceVersion"],
                            "annotations": fence_annotations(previous.epoch),
                        }
                    },
                )
            except ApiError as e:
                if e.status in (404, 409):
                    continue  # renewed (alive after all) or gone
                raise
            states[identity] = MemberState.from_record(lease_record(patched["metadata"].get("annotations")))
            fenced.append(identity)
            self.fences.append((time.time(), str(identity), previous.epoch))
        target = {MemberId(k): tuple(v) for k, v in self.target(sorted(live)).items()}
        result = next_plan(previous, target, states, expired=fenced, strategy=self.strategy, now=time.time())
        if not result.changed:
            return
        body = render_plan_configmap(self.namespace, self.policy, result.published)
        if configmap is None:
            self.api.create("ConfigMap", self.namespace, body)
        else:
            body["metadata"]["resourceVersion"] = configmap["metadata"]["resourceVersion"]
            try:
                self.api.replace("ConfigMap", self.namespace, body)
            except ApiError as e:
                if e.status == 409:
                    return
                raise
        self.publications.append(
            Publication(
                at=time.time(),
                epoch=result.published.epoch,
                assignment={str(k): v for k, v in result.published.plan.assignment.items()},
                waiting={tp: str(i) for tp, i in result.waiting.items()},
            )
        )

    def settled(self, expected: Mapping[str, Sequence[TopicPartition]] | None = None) -> bool:
        """No release pending and (when given) the published sets equal `expected`."""
        published = self.current()
        if published.releasing:
            return False
        if expected is None:
            return True
        have = {str(k): tuple(sorted(v)) for k, v in published.plan.assignment.items() if v}
        want = {k: tuple(sorted(v)) for k, v in expected.items() if v}
        return have == want
