"""The operator's Kafka lag readers against Apache Kafka's own broker: policies read concurrently
through one reader per connection get exactly what `KafkaLagSource.read` gives each of them
(lags, raw offsets, the reset rule, unknown groups, owners, replica racks, history rows), from one
AdminClient and far fewer ListOffsets calls than policies; an unreachable cluster or refused
credentials fail as they always did, and never hold up or poison the other connections."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, cast

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from groupops.controller.lagfleet import KafkaClusterReaders
from groupops.controller.metrics import Metrics
from groupops.devstack import KafkaCluster, KafkaSettings
from groupops.lag import LagAuthorizationError, LagError, LagSnapshot, LagSourceUnavailable
from groupops.lag.history import OffsetHistory
from groupops.lag.kafka import GroupOffsets, KafkaLagSettings, KafkaLagSource
from tests.integration.test_kafka_lag import consume_and_commit, create_topic, produce

pytestmark = pytest.mark.integration

# Long enough that every policy of a test, started together, meets in the same rounds on a busy
# CI machine; with the operator's 50 ms, a read slowed by its own OffsetFetch may open a round of
# its own (seven policies on this machine: three rounds, six ListOffsets instead of fourteen).
ROUND_S = 0.3


@dataclass(frozen=True)
class Policy:
    group: str
    topics: tuple[str, ...]
    reset: str = "earliest"


class RecordingHistory:
    """Stands in for `OffsetHistory`: keeps what each read would append."""

    def __init__(self) -> None:
        self.records: list[tuple[GroupOffsets, str, dict[str, str]]] = []
        self._lock = threading.Lock()

    def record(self, offsets: GroupOffsets, *, bootstrap: str, client_config: Mapping[str, str]) -> int:
        with self._lock:
            self.records.append((replace(offsets, taken_at=0.0), bootstrap, dict(client_config)))
        return len(offsets.offsets)

    def appended(self) -> list[tuple[GroupOffsets, str, dict[str, str]]]:
        """What was appended, in a fixed order (reads running together finish in any order)."""
        return sorted(self.records, key=repr)


def lag_settings(bootstrap: str, policy: Policy, **more: Any) -> KafkaLagSettings:
    return KafkaLagSettings(bootstrap_servers=bootstrap, auto_offset_reset=policy.reset, **more)


def untimed(snapshot: LagSnapshot) -> LagSnapshot:
    return replace(snapshot, taken_at=0.0)


def read_alone(
    bootstrap: str, policy: Policy, history: RecordingHistory | None = None, **more: Any
) -> LagSnapshot:
    """What the policy reads today: a client of its own."""
    with KafkaLagSource(
        lag_settings(bootstrap, policy, **more), history=cast(OffsetHistory, history)
    ) as source:
        return source.read(policy.group, list(policy.topics))


def read_together(
    readers: KafkaClusterReaders,
    reads: Sequence[tuple[KafkaLagSettings, Policy]],
    history: RecordingHistory | None = None,
) -> list[LagSnapshot | LagError]:
    """Every read at once, as the lag pool runs them; each gives its snapshot or its error."""
    start = threading.Barrier(len(reads))

    def one(read: tuple[KafkaLagSettings, Policy]) -> LagSnapshot | LagError:
        settings, policy = read
        start.wait(timeout=30)
        try:
            return readers.read(
                settings, policy.group, list(policy.topics), history=cast(OffsetHistory, history)
            )
        except LagError as e:
            return e

    with ThreadPoolExecutor(len(reads)) as pool:
        return list(pool.map(one, reads))


def requests(metrics: Metrics, cluster: str, request: str) -> float:
    value = metrics.registry.get_sample_value(
        "groupops_operator_kafka_admin_requests_total", {"cluster": cluster, "request": request}
    )
    return value or 0.0


def clients(metrics: Metrics, cluster: str) -> float:
    value = metrics.registry.get_sample_value(
        "groupops_operator_kafka_admin_clients_total", {"cluster": cluster}
    )
    return value or 0.0


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def readers(metrics: Metrics) -> Iterator[KafkaClusterReaders]:
    fleet = KafkaClusterReaders(metrics, window_s=ROUND_S)
    yield fleet
    fleet.close()


@pytest.fixture
def operator_readers(metrics: Metrics) -> Iterator[KafkaClusterReaders]:
    """With the operator's rounds (50 ms)."""
    fleet = KafkaClusterReaders(metrics)
    yield fleet
    fleet.close()


@pytest.fixture
def live_member(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Iterator[Callable[[str], str]]:
    """join(topic) -> group: a consumer subscribed to `topic` stays in its group for the test."""
    consumers: list[Consumer] = []

    def join(topic: str) -> str:
        group = unique_name("live")
        consumer = Consumer(
            {"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        consumers.append(consumer)
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the consumer never got its partitions"
            consumer.poll(0.2)
        return group

    yield join
    for consumer in consumers:
        consumer.close()


@pytest.fixture
def policies(
    kafka_bootstrap: str, unique_name: Callable[[str], str], live_member: Callable[[str], str]
) -> list[Policy]:
    """Seven policies on one cluster, between them every case a read distinguishes."""
    orders, payments = unique_name("orders"), unique_name("payments")
    create_topic(kafka_bootstrap, orders, 3)
    create_topic(kafka_bootstrap, payments, 2)
    produce(kafka_bootstrap, orders, [300, 200, 100])
    produce(kafka_bootstrap, payments, [50, 70])
    billing, audit, ledger = unique_name("billing"), unique_name("audit"), unique_name("ledger")
    consume_and_commit(kafka_bootstrap, billing, orders, {0: 100, 1: 100, 2: 100})
    consume_and_commit(kafka_bootstrap, audit, orders, {0: 300})
    consume_and_commit(kafka_bootstrap, ledger, payments, {0: 10, 1: 70})
    return [
        Policy(billing, (orders,)),
        Policy(audit, (orders,)),  # p1 and p2 never committed: end - start
        Policy(audit, (orders,), reset="latest"),  # ... and 0 under latest
        Policy(ledger, (payments,)),
        Policy(ledger, ()),  # its topics from its commits
        Policy(unique_name("newcomer"), (orders, payments)),  # a group Kafka does not know
        Policy(live_member(orders), (orders,)),  # a live member: the assignment and its owners
    ]


def test_policies_read_together_get_what_each_reads_alone_from_one_client_and_few_list_offsets(
    kafka_bootstrap: str, policies: list[Policy], readers: KafkaClusterReaders, metrics: Metrics
) -> None:
    shared_history, alone_history = RecordingHistory(), RecordingHistory()
    together = read_together(
        readers, [(lag_settings(kafka_bootstrap, p), p) for p in policies], shared_history
    )
    first_round = {
        r: requests(metrics, kafka_bootstrap, r) for r in ("ListOffsets", "DescribeGroups", "DescribeTopics")
    }
    again = read_together(readers, [(lag_settings(kafka_bootstrap, p), p) for p in policies[:3]])
    alone = [read_alone(kafka_bootstrap, p, alone_history) for p in policies]

    assert [untimed(cast(LagSnapshot, s)) for s in together] == [untimed(s) for s in alone]
    assert [untimed(cast(LagSnapshot, s)) for s in again] == [untimed(s) for s in alone[:3]]
    assert shared_history.appended() == alone_history.appended()
    live = together[-1]
    assert isinstance(live, LagSnapshot) and live.assignment is not None and live.assignment.stable
    assert len(live.assignment.owners()) == 3, "the live member owns every partition of its topic"

    assert clients(metrics, kafka_bootstrap) == 1, "one client, kept for the next reads too"
    assert readers.connections == 1
    # A round asks the log starts and the log ends of every partition of every policy in it: two
    # calls for the seven policies (four if one straggler missed the round), not fourteen.
    assert first_round["ListOffsets"] <= 4 < len(policies), first_round
    assert first_round["DescribeGroups"] < len(policies), first_round
    assert requests(metrics, kafka_bootstrap, "DescribeTopics") == first_round["DescribeTopics"], (
        "topic metadata is reused for seconds"
    )
    # OffsetFetch stays per group: one per read of a known group (the newcomer is not known), two
    # for the policy that names no topics (its topics come from its commits).
    assert requests(metrics, kafka_bootstrap, "OffsetFetch") == 7 + 3


def test_an_unreachable_cluster_fails_as_before_and_holds_up_no_other_cluster(
    kafka_bootstrap: str, policies: list[Policy], operator_readers: KafkaClusterReaders, metrics: Metrics
) -> None:
    readers = operator_readers
    nowhere = "127.0.0.1:1"  # nothing listens on port 1
    doomed = Policy("doomed", ("doomed",))
    with pytest.raises(LagError) as today:
        read_alone(nowhere, doomed, timeout_s=2.0)

    durations: dict[int, float] = {}

    def timed(index: int, settings: KafkaLagSettings, policy: Policy) -> LagSnapshot | LagError:
        began = time.monotonic()
        try:
            return readers.read(settings, policy.group, list(policy.topics))
        except LagError as e:
            return e
        finally:
            durations[index] = time.monotonic() - began

    healthy = [(lag_settings(kafka_bootstrap, p), p) for p in policies[:4]]
    reads = [(lag_settings(nowhere, doomed, timeout_s=2.0), doomed)] * 3 + healthy
    with ThreadPoolExecutor(len(reads)) as pool:
        outcomes = list(pool.map(timed, range(len(reads)), [s for s, _ in reads], [p for _, p in reads]))

    for failed in outcomes[:3]:
        assert isinstance(failed, LagSourceUnavailable)
        assert type(failed) is type(today.value) and str(failed) == str(today.value)
    expected = [untimed(read_alone(kafka_bootstrap, p)) for p in policies[:4]]
    assert [untimed(cast(LagSnapshot, s)) for s in outcomes[3:]] == expected
    assert max(durations[i] for i in range(3, len(reads))) < 1.5, "the dead cluster held up a healthy one"
    assert min(durations[i] for i in range(3)) > 1.5, "the dead cluster's reads ran their course beside them"

    assert readers.connections == 2
    assert clients(metrics, kafka_bootstrap) == 1 and clients(metrics, nowhere) == 1
    after = readers.read(healthy[0][0], healthy[0][1].group, list(healthy[0][1].topics))
    assert untimed(after) == expected[0]


def test_other_credentials_never_share_a_client_and_a_refused_login_is_reported_every_time(
    kafka_cluster_factory: Callable[[KafkaSettings], KafkaCluster],
    unique_name: Callable[[str], str],
    readers: KafkaClusterReaders,
    metrics: Metrics,
) -> None:
    cluster = kafka_cluster_factory(
        KafkaSettings(sasl_users={"admin": "admin-secret", "alice": "alice-secret"})
    )
    bootstrap = cluster.sasl_bootstrap
    assert bootstrap is not None

    def sasl(user: str, password: str) -> dict[str, str]:
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": password,
        }

    topic = unique_name("secured")
    create_topic(bootstrap, topic, 2, sasl("admin", "admin-secret"))
    produce(cluster.bootstrap, topic, [7, 3])
    policy = Policy(unique_name("secured-group"), (topic,))
    as_admin = lag_settings(bootstrap, policy, client_config=sasl("admin", "admin-secret"))
    as_alice = lag_settings(bootstrap, policy, client_config=sasl("alice", "alice-secret"))  # no ACL
    as_intruder = lag_settings(bootstrap, policy, client_config=sasl("admin", "wrong"))

    def alone(settings: KafkaLagSettings) -> LagSnapshot | LagError:
        try:
            with KafkaLagSource(settings) as source:
                return source.read(policy.group, list(policy.topics))
        except LagError as e:
            return e

    for _ in range(2):  # the second time, the intruder's refused client has been replaced
        together = read_together(readers, [(as_admin, policy), (as_alice, policy), (as_intruder, policy)])
        admin_read, alice_read, intruder_read = together
        assert isinstance(admin_read, LagSnapshot) and admin_read.lags == {topic: [7, 3]}
        assert isinstance(alice_read, LagAuthorizationError) and "refused access" in str(alice_read)
        assert isinstance(intruder_read, LagAuthorizationError)
        for settings, outcome in zip((as_admin, as_alice, as_intruder), together, strict=True):
            today = alone(settings)
            assert type(outcome) is type(today)
            if isinstance(today, LagSnapshot):
                assert untimed(cast(LagSnapshot, outcome)) == untimed(today)

    assert readers.connections == 2, "admin's and alice's clients stay; the intruder's is dropped"
    assert clients(metrics, bootstrap.split(",")[0]) == 4, "admin, alice, and the intruder twice"


def test_replica_racks_read_together_match_those_read_alone(
    kafka_rack_cluster: str, unique_name: Callable[[str], str], readers: KafkaClusterReaders
) -> None:
    spread = unique_name("spread")
    admin = AdminClient({"bootstrap.servers": kafka_rack_cluster})  # kept: a dropped client fails its futures
    admin.create_topics([NewTopic(spread, 3, 3)])[spread].result(timeout=30)
    policies = [Policy(unique_name("racked"), (spread,)) for _ in range(3)]
    together = read_together(readers, [(lag_settings(kafka_rack_cluster, p), p) for p in policies])
    for policy, snapshot in zip(policies, together, strict=True):
        assert isinstance(snapshot, LagSnapshot)
        assert snapshot.partition_racks[spread] == [frozenset({"r1", "r2", "r3"})] * 3
        assert untimed(snapshot) == untimed(read_alone(kafka_rack_cluster, policy))
