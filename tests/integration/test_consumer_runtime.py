"""The consumer runtime against the real API server and the real broker: `groupops consume`
processes follow plans published by the in-test stand-in of the operator's publish step
(tests/e2e/plan_driver.py), and a journal audit proves at-least-once and exclusive ownership.

Every test has its own namespace, topic and group, and stops its processes at the end.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from groupops.consumer.audit import AuditReport, Fault, audit, load_journals
from groupops.model import MemberId, TopicPartition
from groupops.planner.plan_format import LeaseState, lease_record
from groupops.planner.wire import lease_name
from tests.e2e.kube_api import KubeApi
from tests.e2e.plan_driver import PlanDriver, Target, engine_target
from tests.e2e.runtime_support import (
    ConsumerProcess,
    CuttableProxy,
    SteadyProducer,
    api_server_address,
    consumer_env,
    create_namespace,
    create_topic,
    proxied_kubeconfig,
    scrape,
    stop_all,
)
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.integration

LEASE_SECONDS = 4
STARTUP_S = 180.0


@dataclass
class Group:
    """One test's namespace, topic, group, consumers and driver."""

    api: KubeApi
    bootstrap: str
    namespace: str
    topic: str
    partitions: int
    group_id: str
    workdir: Path
    kubeconfig: str
    policy: str = "orders"
    consumers: dict[str, ConsumerProcess] = field(default_factory=dict)
    proxies: dict[str, CuttableProxy] = field(default_factory=dict)
    driver: PlanDriver | None = None
    faults: list[Fault] = field(default_factory=list)

    @property
    def journal_dir(self) -> Path:
        return self.workdir / "journal"

    def identity(self, ordinal: int) -> str:
        return f"{self.group_id}-{ordinal}"

    def start_driver(self, identities: list[str], target: Target) -> PlanDriver:
        self.driver = PlanDriver(
            api=self.api,
            namespace=self.namespace,
            policy=self.policy,
            identities=identities,
            target=target,
            lease_seconds=LEASE_SECONDS,
        )
        self.driver.create_leases()
        return self.driver.start()

    def consumer(
        self, identity: str, *, key: str | None = None, extra: Mapping[str, str] | None = None
    ) -> ConsumerProcess:
        """Start (and remember) `groupops consume` for `identity`, behind its own proxy."""
        key = key or identity
        host, port = api_server_address(self.kubeconfig)
        proxy = CuttableProxy(host, port)
        self.proxies[key] = proxy
        kubeconfig = proxied_kubeconfig(self.kubeconfig, proxy, self.workdir / f"{key}.kubeconfig")
        process = ConsumerProcess(
            identity=identity,
            env=consumer_env(
                policy=self.policy,
                identity=identity,
                namespace=self.namespace,
                group_id=self.group_id,
                bootstrap=self.bootstrap,
                kubeconfig=kubeconfig,
                record_dir=self.journal_dir,
                lease_seconds=LEASE_SECONDS,
                extra=extra,
            ),
            log_path=self.workdir / f"{key}.log",
        )
        self.consumers[key] = process
        process.start()
        return process

    def lease(self, identity: str) -> dict[str, object]:
        lease = self.api.get("Lease", self.namespace, lease_name(self.policy, identity))
        assert lease is not None
        return lease

    def acked(self, identity: str) -> int | None:
        lease = self.api.get("Lease", self.namespace, lease_name(self.policy, identity))
        return None if lease is None else lease_record(lease["metadata"].get("annotations")).acked_epoch

    def all_acked_current(self, identities: Sequence[str]) -> bool:
        assert self.driver is not None
        current = self.driver.current()
        return not current.releasing and all(self.acked(i) == current.epoch for i in identities)

    def audit(self, produced: list[tuple[str, int, int]]) -> AuditReport:
        return audit(load_journals(self.journal_dir), produced, self.faults)

    def wait_processed(self, produced: list[tuple[str, int, int]], timeout: float = 180.0) -> AuditReport:
        """Wait until every produced message was processed; the audit then."""
        deadline = time.monotonic() + timeout
        report = self.audit(produced)
        while report.missing and time.monotonic() < deadline:
            time.sleep(1.0)
            report = self.audit(produced)
        missing = sorted({(t, p) for t, p, _ in report.missing})
        assert not report.missing, (
            f"{report.summary()}; partitions with missing messages {missing}\n{self.diagnostics()}"
        )
        return report

    def close(self) -> None:
        if self.driver is not None:
            self.driver.stop()
        stop_all(self.consumers.values())
        for proxy in self.proxies.values():
            proxy.close()

    def diagnostics(self) -> str:
        return "\n".join(f"--- {key}\n{p.log_tail(15)}" for key, p in self.consumers.items())


@pytest.fixture
def group(
    kafka_bootstrap: str, kube_config: str, unique_name: Callable[[str], str], tmp_path: Path
) -> Iterator[Group]:
    api = KubeApi(kube_config)
    namespace = unique_name("runtime")
    create_namespace(api, namespace)
    topic = unique_name("orders")
    create_topic(kafka_bootstrap, topic, 6)
    g = Group(
        api=api,
        bootstrap=kafka_bootstrap,
        namespace=namespace,
        topic=topic,
        partitions=6,
        group_id=unique_name("processor"),
        workdir=tmp_path,
        kubeconfig=kube_config,
    )
    try:
        yield g
    finally:
        g.close()
        api.close()


def owned_in_plan(g: Group, identity: str) -> tuple[TopicPartition, ...]:
    assert g.driver is not None
    return tuple(g.driver.current().plan.assignment.get(MemberId(identity), ()))


def test_replicas_follow_every_plan_and_hand_partitions_over_without_loss_or_overlap(group: Group) -> None:
    g = group
    identities = [g.identity(i) for i in range(3)]
    topics = {g.topic: g.partitions}
    driver = g.start_driver(identities, engine_target("range", topics))
    for identity in identities:
        g.consumer(identity)
    producer = SteadyProducer(g.bootstrap, g.topic, g.partitions, total=6000, rate=150).start()
    wait_for("3 live replicas acknowledging one plan", lambda: g.all_acked_current(identities), STARTUP_S)

    # Replans while messages keep arriving: every one moves partitions between live replicas.
    for strategy in ("roundrobin", "failover", "range", "roundrobin"):
        target = engine_target(strategy, topics, priorities={identities[1]: 10})
        driver.target = target
        expected = target(identities)
        wait_for(
            f"plan {strategy} applied",
            lambda e=expected: driver.settled(e) and g.all_acked_current(identities),
        )
        for identity in identities:
            record = lease_record(g.lease(identity)["metadata"]["annotations"])  # type: ignore[index]
            assert record.state is LeaseState.ACTIVE
            assert record.partitions == owned_in_plan(g, identity)

    produced = producer.wait().acked
    report_seen = g.wait_processed(produced)
    print(f"\n{report_seen.summary()}; publications {len(driver.publications)}")
    assert report_seen.overlaps == []
    # A graceful handoff commits before it acknowledges: a duplicate it caused would have no
    # fault to explain it (a self-fence on an overloaded machine would, and is journaled).
    assert report_seen.unexplained == []
    # Two epochs per move: a partition enters a new owner's set only from a plan that gave it to
    # nobody (released, waiting), unless its old owner was fenced.
    fenced = {identity for _, identity, _ in driver.fences}
    for before, after in zip(driver.publications, driver.publications[1:], strict=False):
        owner_before = {tp: identity for identity, tps in before.assignment.items() for tp in tps}
        for identity, tps in after.assignment.items():
            for tp in tps:
                old = owner_before.get(tp)
                assert old in (None, identity) or old in fenced, (
                    f"{tp} moved from {old} to {identity} in one epoch ({before.epoch} -> {after.epoch})"
                )
    moves = sum(1 for p in driver.publications if p.waiting)
    print(f"release epochs {moves}, fences {driver.fences}, publications {len(driver.publications)}")
    assert moves >= 1, "the replans moved partitions through release epochs"


def test_a_replica_serves_metrics_that_match_the_plan_it_acknowledged(group: Group) -> None:
    g = group
    identities = [g.identity(0), g.identity(1)]
    driver = g.start_driver(identities, engine_target("range", {g.topic: g.partitions}))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    g.consumer(identities[0], extra={"GROUPOPS_METRICS_PORT": str(port)})
    g.consumer(identities[1])
    wait_for("both acknowledging", lambda: g.all_acked_current(identities), STARTUP_S)

    def metrics_of_the_range_plan() -> dict[str, float] | None:
        # The plan splits the partitions in two; a loaded machine may first judge a replica
        # expired for a while (then it owns nothing): wait for the split and what it serves.
        current, owned = driver.current(), len(owned_in_plan(g, identities[0]))
        if current.releasing or owned != g.partitions // 2:
            return None
        samples = scrape(port)
        matches = (
            samples.get("groupops_consumer_epoch_applied") == current.epoch
            and samples.get("groupops_consumer_partitions_owned") == owned
        )
        return samples if matches else None

    samples = wait_for("the scraped metrics matching the plan", metrics_of_the_range_plan, 120)
    assert samples["groupops_consumer_lease_valid"] == 1
    fences = [f for f in load_journals(g.journal_dir).fences() if f.identity == identities[0]]
    assert samples["groupops_consumer_self_fences_total"] <= len(fences), "every counted fence is journaled"


def test_sigterm_releases_everything_and_the_standby_takes_over_without_waiting_for_expiry(
    group: Group,
) -> None:
    g = group
    active, standby = g.identity(0), g.identity(1)
    topics = {g.topic: g.partitions}
    # A long lease: a takeover faster than it proves nobody waited for expiry.
    long_lease = "60"
    g.start_driver([active, standby], engine_target("failover", topics, priorities={active: 10, standby: 5}))
    g.consumer(active, extra={"GROUPOPS_LEASE_DURATION_SECONDS": long_lease})
    g.consumer(standby, extra={"GROUPOPS_LEASE_DURATION_SECONDS": long_lease})
    wait_for(
        "the active replica owning every partition",
        lambda: len(owned_in_plan(g, active)) == g.partitions,
        STARTUP_S,
    )
    wait_for("both acknowledging", lambda: g.all_acked_current([active, standby]), STARTUP_S)
    producer = SteadyProducer(g.bootstrap, g.topic, g.partitions, total=3000, rate=200).start()
    time.sleep(2.0)  # let the active one process and commit a little

    stopped_at = time.time()
    assert g.consumers[active].terminate(grace=60) == 0
    lease = g.lease(active)
    record = lease_record(lease["metadata"]["annotations"])  # type: ignore[index]
    assert record.state is LeaseState.RELEASED
    assert record.partitions == ()
    assert not lease["spec"].get("holderIdentity")  # type: ignore[union-attr]
    assert record.released_through is not None and record.released_through >= (record.acked_epoch or 0)

    wait_for(
        "the standby owning every partition", lambda: len(owned_in_plan(g, standby)) == g.partitions, 120
    )
    produced = producer.wait().acked
    report = g.wait_processed(produced)
    journals = load_journals(g.journal_dir)
    first_by_standby = min(
        r.start for r in journals.processed if r.identity == standby and r.start > stopped_at
    )
    handover = first_by_standby - stopped_at
    print(f"\ngraceful handover {handover:.2f} s (lease duration {long_lease} s); {report.summary()}")
    assert handover < int(long_lease), "the standby waited for the Lease to expire"
    assert report.overlaps == []
    assert report.unexplained == [], "a graceful stop commits everything it processed"


def test_a_replica_cut_from_the_api_server_stops_consuming_and_resumes_only_under_a_newer_plan(
    group: Group,
) -> None:
    g = group
    active, standby = g.identity(0), g.identity(1)
    topics = {g.topic: g.partitions}
    driver = g.start_driver(
        [active, standby], engine_target("failover", topics, priorities={active: 10, standby: 5})
    )
    g.consumer(active)
    g.consumer(standby)
    wait_for(
        "the active replica owning everything",
        lambda: len(owned_in_plan(g, active)) == g.partitions,
        STARTUP_S,
    )
    wait_for("both acknowledging", lambda: g.all_acked_current([active, standby]), STARTUP_S)
    producer = SteadyProducer(g.bootstrap, g.topic, g.partitions, total=4000, rate=200).start()
    time.sleep(2.0)

    cut_at = time.time()
    g.faults.append(Fault(active, "cut", cut_at))
    g.proxies[active].cut()
    wait_for("the standby owning everything", lambda: len(owned_in_plan(g, standby)) == g.partitions, 120)
    fenced = wait_for(
        "the cut replica fencing itself",
        lambda: [e for e in load_journals(g.journal_dir).events if e["k"] == "fence" and e["i"] == active],
        60,
    )
    fence_at = fenced[0]["w"]
    assert any(f[1] == active for f in driver.fences), "the driver fenced its Lease"

    g.proxies[active].restore()
    # Failback: once it renews again it sees the fence, waits for a newer plan, gets everything back.
    wait_for("the active replica back in charge", lambda: len(owned_in_plan(g, active)) == g.partitions, 120)
    wait_for("both acknowledging", lambda: g.all_acked_current([active, standby]), 120)
    produced = producer.wait().acked
    report = g.wait_processed(produced)
    journals = load_journals(g.journal_dir)
    resume = min(
        (e for e in journals.events if e["k"] == "resume" and e["i"] == active and e["w"] > fence_at),
        key=lambda e: e["w"],
    )
    resumed_at = resume["w"]
    fence_epoch = max(epoch for _, identity, epoch in driver.fences if identity == active)
    assert resume["epoch"] > resume["floor"] >= fence_epoch, (
        "it resumed only under a plan newer than its fence"
    )
    while_fenced = [
        r for r in journals.processed if r.identity == active and r.end > fence_at and r.start < resumed_at
    ]
    print(f"\nfenced {fence_at - cut_at:.2f} s after the cut; {report.summary()}")
    assert while_fenced == [], "nothing processed between the fence and the resume"
    assert report.overlaps == []
    assert report.unexplained == []


def test_a_frozen_replica_does_not_process_beside_its_successor_when_it_wakes(group: Group) -> None:
    g = group
    active, standby = g.identity(0), g.identity(1)
    topics = {g.topic: g.partitions}
    g.start_driver([active, standby], engine_target("failover", topics, priorities={active: 10, standby: 5}))
    g.consumer(active, extra={"GROUPOPS_PROCESSOR": "groupops.consumer.processors:sleep_1ms"})
    g.consumer(standby, extra={"GROUPOPS_PROCESSOR": "groupops.consumer.processors:sleep_1ms"})
    wait_for(
        "the active replica owning everything",
        lambda: len(owned_in_plan(g, active)) == g.partitions,
        STARTUP_S,
    )
    wait_for("both acknowledging", lambda: g.all_acked_current([active, standby]), STARTUP_S)
    producer = SteadyProducer(g.bootstrap, g.topic, g.partitions, total=4000, rate=250).start()
    time.sleep(2.0)

    g.faults.append(Fault(active, "freeze", time.time()))
    g.consumers[active].signal(signal.SIGSTOP)
    wait_for("the standby owning everything", lambda: len(owned_in_plan(g, standby)) == g.partitions, 120)
    wait_for(
        "the standby processing",
        lambda: any(r.identity == standby for r in load_journals(g.journal_dir).processed),
        60,
    )
    g.consumers[active].signal(signal.SIGCONT)
    wait_for("the frozen replica back in charge", lambda: len(owned_in_plan(g, active)) == g.partitions, 120)
    produced = producer.wait().acked
    report = g.wait_processed(produced)
    print(f"\n{report.summary()}")
    assert report.overlaps == []
    assert report.unexplained == []


def test_a_second_process_of_one_identity_waits_until_the_first_is_gone(group: Group) -> None:
    g = group
    identity = g.identity(0)
    topics = {g.topic: g.partitions}
    g.start_driver([identity], engine_target("range", topics))
    first = g.consumer(identity, key="first")
    wait_for("the first process acknowledging", lambda: g.all_acked_current([identity]), STARTUP_S)
    first_incarnation = lease_record(g.lease(identity)["metadata"]["annotations"]).incarnation  # type: ignore[index]

    g.consumer(identity, key="second")
    time.sleep(LEASE_SECONDS * 2)  # the first keeps renewing: the second must keep waiting
    assert lease_record(g.lease(identity)["metadata"]["annotations"]).incarnation == first_incarnation  # type: ignore[index]

    killed_at = time.time()
    first.kill()
    g.faults.append(Fault(identity, "crash", killed_at))
    wait_for(
        "the second process holding the Lease",
        lambda: (
            lease_record(g.lease(identity)["metadata"]["annotations"]).incarnation
            not in (None, first_incarnation)
        ),  # type: ignore[index]
        120,
    )
    taken_after = time.time() - killed_at
    print(f"\nsecond process took the Lease {taken_after:.2f} s after the first died")
    wait_for("the second process acknowledging", lambda: g.all_acked_current([identity]), 120)


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_native_delivery_joins_as_static_members_and_kafka_assigns_as_the_engine_predicts(
    group: Group, strategy: str
) -> None:
    g = group
    identities = [g.identity(i) for i in range(3)]
    extra = {"GROUPOPS_DELIVERY": "native", "GROUPOPS_STRATEGY": strategy, "GROUPOPS_TOPICS": g.topic}
    for identity in identities:
        g.consumer(identity, extra=extra)
    admin = AdminClient({"bootstrap.servers": g.bootstrap})

    def stable_members() -> list[object] | None:
        description = admin.describe_consumer_groups([g.group_id])[g.group_id].result(timeout=30)
        members = list(description.members)
        assigned = sum(len(m.assignment.topic_partitions) for m in members)
        if str(description.state).endswith("STABLE") and len(members) == 3 and assigned == g.partitions:
            return members
        return None

    members = wait_for("a stable group of 3 static members", stable_members, STARTUP_S, interval=1.0)
    actual = {
        m.group_instance_id: sorted(
            TopicPartition(tp.topic, tp.partition) for tp in m.assignment.topic_partitions
        )  # type: ignore[attr-defined]
        for m in members
    }
    assert sorted(actual) == identities, "every replica joined with its identity as group.instance.id"
    predicted = engine_target(strategy, {g.topic: g.partitions})(identities)
    assert actual == {identity: list(predicted[identity]) for identity in identities}
