"""The whole product on the test stack, for the handoff and failover e2e tests: the real
operator (`groupops operator`, a subprocess), the kubelet harness running one `groupops
consume` per pod it creates, the real broker, and the journal audit.

`policy_stack(...)` builds one: its own namespace, topic and group; the operator watching that
namespace with the given lease duration; the harness writing journals to `record_dir`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from groupops.consumer.audit import AuditReport, audit, load_journals
from groupops.devstack.kube_api import ApiError, KubeApi
from groupops.devstack.kubelet import Kubelet
from groupops.model import MemberId, TopicPartition
from groupops.planner.handoff import DEFAULT_LEASE_DURATION_S
from groupops.planner.plan_format import PublishedPlan, lease_record, plan_from_configmap
from groupops.planner.wire import lease_name, plan_configmap_name
from tests.e2e.operator_support import (
    TICK_S,
    Kubectl,
    OperatorProcess,
    create_namespace,
    install_crd,
    kubetool,
)
from tests.e2e.runtime_support import create_topic, scrape, total
from tests.e2e.waiting import wait_for


@dataclass
class PolicyStack:
    api: KubeApi
    kubectl: Kubectl
    namespace: str
    name: str
    group_id: str
    topic: str
    partitions: int
    bootstrap: str
    operator: OperatorProcess
    kubelet: Kubelet
    workdir: Path
    lease_seconds: int

    @property
    def record_dir(self) -> Path:
        return self.kubelet.record_dir

    def identity(self, ordinal: int) -> str:
        return f"{self.group_id}-{ordinal}"

    def pod(self, ordinal: int) -> str:
        return f"{self.name}-{ordinal}"

    def policy(self, **spec: Any) -> dict[str, Any]:
        document: dict[str, Any] = {
            "apiVersion": "groupops.dev/v1alpha1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": self.name},
            "spec": {
                "kafka": {"bootstrapServers": self.bootstrap},
                "groupId": self.group_id,
                "topics": [self.topic],
                "strategy": {"type": "range", "autoOffsetReset": "earliest"},
                "lagSource": {"type": "kafka"},
                "consumers": {"replicas": 3},
            },
        }
        document["spec"].update(spec)
        return document

    def apply(self, **spec: Any) -> None:
        self.kubectl.apply(self.policy(**spec), self.namespace)

    def plan(self) -> PublishedPlan | None:
        configmap = self.api.get("ConfigMap", self.namespace, plan_configmap_name(self.name))
        if configmap is None:
            return None
        return plan_from_configmap(configmap.get("data") or {}, configmap["metadata"].get("annotations"))

    def sets(self) -> dict[str, tuple[TopicPartition, ...]]:
        plan = self.plan()
        return {} if plan is None else {str(k): tuple(v) for k, v in plan.plan.assignment.items() if v}

    def owner_of_everything(self) -> str | None:
        sets = self.sets()
        plan = self.plan()
        if len(sets) == 1 and plan is not None and not plan.releasing:
            ((owner, partitions),) = sets.items()
            return owner if len(partitions) == self.partitions else None
        return None

    def acked(self, identity: str) -> int | None:
        lease = self.api.get("Lease", self.namespace, lease_name(self.name, identity))
        return None if lease is None else lease_record(lease["metadata"].get("annotations")).acked_epoch

    def settled(self, identities: list[str]) -> bool:
        """A plan with nothing pending, every partition owned, acknowledged by `identities`."""
        plan = self.plan()
        if plan is None or plan.releasing:
            return False
        owned = sum(len(v) for v in plan.plan.assignment.values())
        return owned == self.partitions and all(self.acked(i) == plan.epoch for i in identities)

    def status(self) -> dict[str, Any]:
        policy = self.api.get("ConsumerGroupPolicy", self.namespace, self.name) or {}
        return dict(policy.get("status") or {})

    def owner_in_plan(self, tp: TopicPartition) -> str | None:
        plan = self.plan()
        if plan is None:
            return None
        for identity, partitions in plan.plan.assignment.items():
            if tp in partitions:
                return str(identity)
        return None

    def seconds_until_moved(self, ordinal: int, fault: Callable[[str], None], what: str) -> float:
        """Apply `fault` (a `Kubelet` method: crash, freeze, cut) to the pod of `ordinal`; the
        seconds until the plan gives every partition its identity owned to another identity."""
        identity = self.identity(ordinal)
        held = self.sets()[identity]
        started = time.monotonic()
        fault(self.pod(ordinal))
        wait_for(
            f"the {what} replica's partitions owned elsewhere",
            lambda: all(self.owner_in_plan(tp) not in (None, identity) for tp in held),
            60,
            interval=0.2,
            explain=self.diagnostics,
        )
        return time.monotonic() - started

    def audit(self, produced: list[tuple[str, int, int]]) -> AuditReport:
        return audit(load_journals(self.record_dir), produced, self.kubelet.faults)

    def wait_processed(self, produced: list[tuple[str, int, int]], timeout: float = 300.0) -> AuditReport:
        deadline = time.monotonic() + timeout
        report = self.audit(produced)
        while report.missing and time.monotonic() < deadline:
            time.sleep(2.0)
            report = self.audit(produced)
        missing = sorted({(t, p) for t, p, _ in report.missing})
        assert not report.missing, (
            f"{report.summary()}; partitions missing messages {missing}\n{self.diagnostics()}"
        )
        return report

    def metrics_of(self, identity: str) -> dict[str, float]:
        """The unlabelled series a running replica of `identity` serves (name -> value)."""
        return scrape(self._metrics_port(identity))

    def metric_total(self, identity: str, name: str, **labels: str) -> float:
        """The sum of `name`'s samples with `labels` that a running replica of `identity` serves."""
        return total(self._metrics_port(identity), name, **labels)

    def _metrics_port(self, identity: str) -> str:
        run = next(r for r in reversed(self.kubelet.history) if r.identity == identity and r.process.alive())
        return run.process.env["GROUPOPS_METRICS_PORT"]

    def state(self) -> str:
        """The plan and every Lease as the API server has them now (for a failed wait)."""
        plan = self.plan()
        if plan is None:
            lines = ["--- plan: none"]
        else:
            lines = [f"--- plan {plan.epoch}: {dict(plan.plan.assignment)}; releasing {dict(plan.releasing)}"]
        for lease in self.api.list("Lease", self.namespace):
            meta, spec = lease["metadata"], lease.get("spec") or {}
            notes = {
                k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith("groupops.dev/")
            }
            lines.append(
                f"--- lease {meta['name']}: holder {spec.get('holderIdentity')!r}, renewed "
                f"{spec.get('renewTime')}, {notes}"
            )
        return "\n".join(lines)

    def diagnostics(self) -> str:
        parts = [self.state(), f"--- operator\n{self.operator.log_tail(30)}"]
        for run in self.kubelet.history[-8:]:
            parts.append(f"--- {run.name} ({run.identity})\n{run.process.log_tail(12)}")
        parts.append(f"--- harness errors: {self.kubelet.errors[-5:]}")
        return "\n".join(parts)


StackFactory = Callable[..., AbstractContextManager["PolicyStack"]]
"""The `new_stack` fixture (tests/e2e/conftest.py): `policy_stack` bound to the test's fixtures."""


@contextmanager
def policy_stack(
    *,
    kube_config: str,
    kafka_bootstrap: str,
    unique_name: Any,
    tmp_path: Path,
    partitions: int,
    lease_seconds: int | None = 4,
    operator_tick: str | None = TICK_S,
    extra_env: Mapping[str, str] | None = None,
    restart_delay: float = 1.0,
    operator_args: Sequence[str] = (),
) -> Iterator[PolicyStack]:
    """A namespace with the CRD, a topic, the operator and the kubelet harness. `lease_seconds` or
    `operator_tick` None: the operator runs with its own default; `operator_args`: more flags."""
    kubetool("kubectl")
    kubectl = Kubectl(kube_config)
    install_crd(kubectl)
    namespace = unique_name("handoff")
    create_namespace(kubectl, namespace)
    topic = unique_name("orders")
    create_topic(kafka_bootstrap, topic, partitions)
    api = KubeApi(kube_config)
    operator = OperatorProcess(
        kubeconfig=kube_config,
        namespace=namespace,
        log_path=tmp_path / "operator.log",
        extra=[*([] if lease_seconds is None else ["--lease-duration", str(lease_seconds)]), *operator_args],
        tick=operator_tick,
    )
    kubelet = Kubelet(
        api=api,
        namespace=namespace,
        workdir=tmp_path / "pods",
        record_dir=tmp_path / "journal",
        extra_env=dict(extra_env or {}),
        restart_delay=restart_delay,
    )
    stack = PolicyStack(
        api=api,
        kubectl=kubectl,
        namespace=namespace,
        name="orders",
        group_id=unique_name("processor"),
        topic=topic,
        partitions=partitions,
        bootstrap=kafka_bootstrap,
        operator=operator,
        kubelet=kubelet,
        workdir=tmp_path,
        lease_seconds=DEFAULT_LEASE_DURATION_S if lease_seconds is None else lease_seconds,
    )
    kubelet.start()
    operator.start()
    try:
        yield stack
    finally:
        operator.stop()
        kubelet.stop()
        api.close()


def partition(stack: PolicyStack, number: int) -> TopicPartition:
    return TopicPartition(stack.topic, number)


def members_of(plan: PublishedPlan) -> dict[MemberId, tuple[TopicPartition, ...]]:
    return {k: tuple(v) for k, v in plan.plan.assignment.items()}


HAND_WRITE_ATTEMPTS = 10


def rewrite_plan_by_hand(
    stack: PolicyStack,
    data: Mapping[str, str],
    annotations: Mapping[str, str],
    write: Callable[[Callable[[], dict[str, Any]]], object] | None = None,
) -> None:
    """Replace the plan ConfigMap's data and annotations by hand, as `kubectl edit` or a restore
    would. The operators may write the ConfigMap between our read and our write; like `kubectl
    edit`, a conflict reads the latest version and writes again (the content written is ours
    either way). `write` wraps the write (the election test records it as its own)."""
    name = plan_configmap_name(stack.name)
    for _ in range(HAND_WRITE_ATTEMPTS):
        current = stack.api.get("ConfigMap", stack.namespace, name)
        assert current is not None, f"no ConfigMap {name} to rewrite"
        current["data"] = dict(data)
        current["metadata"]["annotations"] = dict(annotations)

        def replace(body: dict[str, Any] = current) -> dict[str, Any]:
            return stack.api.replace("ConfigMap", stack.namespace, body)

        try:
            if write is None:
                replace()
            else:
                write(replace)
            return
        except ApiError as error:
            if error.status != 409:
                raise
    raise AssertionError(f"ConfigMap {name} changed under {HAND_WRITE_ATTEMPTS} hand writes in a row")
