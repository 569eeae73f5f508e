"""Two policies on one group of one Kafka cluster: the later one stands down (docs/design.md
§6.4). The rule (normalising servers, ordering, tie-breaks, namespaces, dry runs), the index
that wakes the policies whose standing changed, and the reconcile on the in-memory API: the later
one writes only its status, the first is unaffected, and deleting the first lets the later run.
After every rule case, no two colliding claims are both first (`assert_one_owner`)."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import pytest

from groupops.controller.cluster_spec import normalise_server, normalise_servers
from groupops.controller.conflicts import (
    Claim,
    PolicyClaims,
    PolicyKey,
    claim_of,
    conflict_message,
    first_rival,
)
from groupops.controller.events import EventSink
from groupops.controller.metrics import Metrics
from groupops.controller.reconcile import Deps, PolicyMemory, ReconcileFailure, reconcile
from groupops.controller.settings import Settings
from tests.unit.controller.fake_kube import FakeKube

T0 = "2025-01-01T10:00:00Z"
T1 = "2025-01-01T10:05:00Z"


def body(
    name: str,
    *,
    namespace: str = "ns",
    created: str | None = T0,
    group: str = "g",
    servers: str = "kafka:9092",
    cluster: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """A policy object as the API server hands it out (only what the rule reads, and a spec the
    reconcile accepts)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "generation": 1}
    if created is not None:
        meta["creationTimestamp"] = created
    return {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupPolicy",
        "metadata": meta,
        "spec": {
            "kafka": {"bootstrapServers": servers} if cluster is None else {"clusterRef": {"name": cluster}},
            "groupId": group,
            "topics": ["t"],
            "strategy": {"type": "lag"},
            "lagSource": {"type": "static", "static": {"lags": {"t": [50, 40, 30, 20]}}},
            "consumers": {"replicas": 2},
            **({"dryRun": True} if dry_run else {}),
        },
    }


def claim(name: str, **fields: Any) -> Claim:
    found = claim_of(body(name, **fields))
    assert found is not None
    return found


def assert_one_owner(claims: Iterable[Claim]) -> None:
    """The invariant: of two claims that collide, exactly one comes first (the order is strict
    and total), so never both run."""
    claims = list(claims)
    for a in claims:
        for b in claims:
            if a.collides(b):
                assert (a.order < b.order) != (b.order < a.order), f"{a} and {b} tie"
                assert first_rival(a, claims) is not None or first_rival(b, claims) is not None, (
                    f"{a} and {b} both run"
                )


# -- normalising bootstrap servers ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "normal"),
    [
        pytest.param("kafka:9092", "kafka:9092", id="already-normal"),
        pytest.param("Kafka-1.Example.COM:9092", "kafka-1.example.com:9092", id="host-lowercased"),
        pytest.param("kafka", "kafka:9092", id="port-9092-when-none"),
        pytest.param(" kafka:9093 ", "kafka:9093", id="spaces-dropped"),
        pytest.param("kafka.example.com.:9092", "kafka.example.com:9092", id="trailing-dot-dropped"),
        pytest.param("SASL_SSL://kafka:9093", "kafka:9093", id="protocol-prefix-dropped"),
        pytest.param("kafka:09092", "kafka:9092", id="port-as-a-number"),
        pytest.param("[::1]:9092", "[::1]:9092", id="ipv6-with-port"),
        pytest.param("[FE80::1]", "[fe80::1]:9092", id="ipv6-without-port"),
        pytest.param("fe80::1", "fe80::1:9092", id="bare-ipv6-is-all-host"),
        pytest.param("", None, id="nothing"),
    ],
)
def test_a_server_is_compared_with_its_host_lowercased_and_its_port_explicit(
    written: str, normal: str | None
) -> None:
    assert normalise_server(written) == normal


def test_a_bootstrap_list_is_a_set_of_normal_servers() -> None:
    assert normalise_servers("B:9092,a,b:9092,,") == {"a:9092", "b:9092"}


# -- the rule ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "later"),
    [
        pytest.param(
            {"name": "z", "created": T0}, {"name": "a", "created": T1}, id="creation-time-before-name"
        ),
        pytest.param(
            {"name": "z", "namespace": "a", "created": T0},
            {"name": "a", "namespace": "b", "created": T0},
            id="same-second-namespace-first",
        ),
        pytest.param({"name": "a", "created": T0}, {"name": "b", "created": T0}, id="same-second-then-name"),
        pytest.param(
            {"name": "p", "namespace": "team-b", "created": T0},
            {"name": "p", "namespace": "team-a", "created": T1},
            id="namespaces-do-not-separate-a-group",
        ),
        pytest.param(
            {"name": "b", "created": T0}, {"name": "a", "created": None}, id="no-timestamp-sorts-last"
        ),
        pytest.param(
            {"name": "a", "servers": "Kafka-1:9092,kafka-2:9092"},
            {"name": "b", "servers": "KAFKA-2"},
            id="one-shared-server-is-one-cluster",
        ),
        pytest.param(
            {"name": "a", "cluster": "prod"}, {"name": "b", "cluster": "prod"}, id="one-consumergroupcluster"
        ),
        pytest.param(
            {"name": "a", "created": "2025-01-01T11:00:00+01:00"},
            {"name": "b", "created": "2025-01-01T10:00:01Z"},
            id="times-compared-as-times",
        ),
    ],
)
def test_the_later_claim_stands_down_for_the_first(first: dict[str, Any], later: dict[str, Any]) -> None:
    a, b = claim(**first), claim(**later)
    assert first_rival(b, [a, b]) == a
    assert first_rival(a, [a, b]) is None
    assert_one_owner([a, b])


@pytest.mark.parametrize(
    "other",
    [
        pytest.param({"name": "b", "group": "h"}, id="another-group"),
        pytest.param({"name": "b", "group": "G"}, id="group-ids-are-case-sensitive"),
        pytest.param({"name": "b", "servers": "kafka:9093"}, id="another-port"),
        pytest.param({"name": "b", "servers": "other-kafka:9092"}, id="another-cluster"),
        pytest.param({"name": "b", "cluster": "staging"}, id="another-consumergroupcluster"),
        pytest.param({"name": "a", "namespace": "ns"}, id="itself"),
    ],
)
def test_claims_that_do_not_collide_both_run(other: dict[str, Any]) -> None:
    a, b = claim("a", created=T1), claim(**other)
    assert first_rival(a, [a, b]) is None
    assert first_rival(b, [a, b]) is None
    assert_one_owner([a, b])


def test_the_message_names_the_rival_the_shared_servers_and_why_it_is_first() -> None:
    later = claim("b", servers="kafka:9092,other:9092")
    earlier = conflict_message(later, claim("a", created="2025-01-01T09:00:00+00:00"))
    same_second = conflict_message(later, claim("a"))
    assert earlier.startswith("policy ns/a claims group g on the same Kafka cluster (kafka:9092)")
    assert "created at 2025-01-01T09:00:00Z, before this one" in earlier
    assert "created in the same second, and its namespace/name sorts first" in same_second


CLUSTERS = {"prod": frozenset({"kafka:9092", "kafka-2:9092"}), "staging": frozenset({"staging:9092"})}


@pytest.mark.parametrize(
    ("first", "later"),
    [
        pytest.param(
            {"name": "a", "cluster": "prod"}, {"name": "b", "servers": "KAFKA-2"}, id="inline-after-ref"
        ),
        pytest.param(
            {"name": "a", "servers": "kafka:9092"}, {"name": "b", "cluster": "prod"}, id="ref-after-inline"
        ),
    ],
)
def test_a_cluster_ref_and_its_clusters_servers_written_inline_are_one_cluster(
    first: dict[str, Any], later: dict[str, Any]
) -> None:
    a, b = claim(**first, created=T0), claim(**later, created=T1)
    assert first_rival(b, [a, b], CLUSTERS.__getitem__) == a
    assert first_rival(a, [a, b], CLUSTERS.__getitem__) is None
    message = conflict_message(b, a, CLUSTERS.__getitem__)
    assert "on the same Kafka cluster (kafka" in message, message


def test_a_cluster_ref_reaches_only_its_own_clusters_servers() -> None:
    a, b = claim("a", cluster="staging", created=T0), claim("b", servers="kafka:9092", created=T1)
    assert first_rival(b, [a, b], CLUSTERS.__getitem__) is None
    unknown = claim("c", cluster="gone", created=T1)
    assert first_rival(unknown, [a, unknown], lambda name: CLUSTERS.get(name, frozenset())) is None


def test_a_dry_run_neither_claims_nor_is_refused() -> None:
    assert claim_of(body("a", dry_run=True)) is None


def test_a_policy_without_a_group_or_servers_claims_nothing() -> None:
    assert claim_of(body("a", group="")) is None
    assert claim_of(body("a", servers=" , ")) is None
    assert claim_of({"metadata": {"name": "a"}}) is None


def test_the_first_rival_is_the_earliest_even_when_it_stands_down_itself() -> None:
    a = claim("a", created=T0, servers="x:9092")
    b = claim("b", created=T1, servers="x:9092,y:9092")
    c = claim("c", created="2025-01-01T10:10:00Z", servers="y:9092")
    claims = [c, b, a]
    assert [first_rival(each, claims) for each in (a, b, c)] == [None, a, b]
    assert_one_owner(claims)


# -- the index and whom it wakes -----------------------------------------------------------------


class Woken:
    def __init__(self) -> None:
        self.calls: list[frozenset[PolicyKey]] = []

    def __call__(self, keys: frozenset[PolicyKey]) -> None:
        self.calls.append(keys)


@pytest.fixture
def woken_index() -> tuple[PolicyClaims, Woken]:
    index = PolicyClaims(FakeKube(), namespaces=("ns",))  # type: ignore[arg-type]  # never started
    woken = Woken()
    index.add_listener(woken)
    return index, woken


def test_a_later_policy_added_wakes_nobody(woken_index: tuple[PolicyClaims, Woken]) -> None:
    index, woken = woken_index
    index.note("ADDED", body("a", created=T0))
    index.note("ADDED", body("b", created=T1))
    assert woken.calls == [], "the first keeps running; kopf starts the newcomer's loop itself"


def test_deleting_the_first_wakes_the_later(woken_index: tuple[PolicyClaims, Woken]) -> None:
    index, woken = woken_index
    first = body("a", created=T0)
    index.note("ADDED", first)
    index.note("ADDED", body("b", created=T1))
    woken.calls.clear()
    index.note("DELETED", first)
    assert woken.calls == [frozenset({("ns", "b")})]


def test_the_first_moving_to_another_group_or_cluster_wakes_the_later(
    woken_index: tuple[PolicyClaims, Woken],
) -> None:
    index, woken = woken_index
    index.note("ADDED", body("a", created=T0))
    index.note("ADDED", body("b", created=T1))
    woken.calls.clear()
    index.note("MODIFIED", body("a", created=T0, group="h"))
    index.note("MODIFIED", body("a", created=T0, group="g"))
    index.note("MODIFIED", body("a", created=T0, servers="other:9092"))
    assert woken.calls == [frozenset({("ns", "b")})] * 3


def test_a_change_of_status_or_of_other_fields_wakes_nobody(woken_index: tuple[PolicyClaims, Woken]) -> None:
    index, woken = woken_index
    index.note("ADDED", body("a", created=T0))
    index.note("ADDED", body("b", created=T1))
    woken.calls.clear()
    changed = body("a", created=T0)
    changed["status"] = {"epoch": 7}
    changed["spec"]["consumers"] = {"replicas": 5}
    index.note("MODIFIED", changed)
    index.note("ADDED", body("c", created=T1, group="other"))
    assert woken.calls == []


def test_the_next_in_line_is_woken_with_a_new_first_rival(woken_index: tuple[PolicyClaims, Woken]) -> None:
    index, woken = woken_index
    first = body("a", created=T0)
    for each in (first, body("b", created=T1), body("c", created="2025-01-01T10:10:00Z")):
        index.note("ADDED", each)
    woken.calls.clear()
    index.note("DELETED", first)
    assert woken.calls == [frozenset({("ns", "b"), ("ns", "c")})]  # b runs; c now names b


# -- the reconcile -------------------------------------------------------------------------------


class Cluster:
    """The in-memory API with a conflict index over `namespaces` (never synced: it lists from
    the API, as the operator does before its watch's first LIST)."""

    def __init__(self, namespaces: tuple[str, ...] = ("ns",)) -> None:
        self.kube = FakeKube()
        self.claims = PolicyClaims(self.kube, namespaces=namespaces)  # type: ignore[arg-type]
        self.memories: dict[PolicyKey, PolicyMemory] = {}

    def put(self, policy: dict[str, Any]) -> None:
        meta = policy["metadata"]
        self.kube.put_policy(meta["namespace"], meta["name"], policy["spec"])
        stored = self.kube.objects[("ConsumerGroupPolicy", meta["namespace"], meta["name"])]
        stored["metadata"]["creationTimestamp"] = meta["creationTimestamp"]

    def run(self, name: str, namespace: str = "ns") -> Any:
        deps = Deps(
            client=self.kube,  # type: ignore[arg-type]
            settings=Settings(),
            metrics=Metrics(),
            events=EventSink(self.kube),  # type: ignore[arg-type]
            wall_clock=lambda: datetime(2025, 1, 1, 11, tzinfo=UTC),
            claims=self.claims,
        )
        memory = self.memories.setdefault((namespace, name), PolicyMemory())
        return reconcile(self.kube.policy(namespace, name), deps, memory)

    def conflict(self, name: str, namespace: str = "ns") -> ReconcileFailure:
        with pytest.raises(ReconcileFailure) as caught:
            self.run(name, namespace)
        return caught.value

    def conditions(self, name: str, namespace: str = "ns") -> dict[str, tuple[str, str, str]]:
        status = self.kube.policy(namespace, name).get("status") or {}
        return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status.get("conditions") or []}

    def owned(self, name: str, namespace: str = "ns") -> dict[str, list[str]]:
        return {
            kind: [n for n in self.kube.names(kind, namespace) if n.startswith(f"{name}-")]
            for kind in ("Pod", "Lease", "ConfigMap", "ServiceAccount")
        }


NOTHING = {"Pod": [], "Lease": [], "ConfigMap": [], "ServiceAccount": []}


def test_the_later_policy_writes_only_its_status_naming_the_first() -> None:
    cluster = Cluster()
    cluster.put(body("a", created=T0))
    cluster.put(body("b", created=T1))
    assert cluster.run("a").published
    before = len(cluster.kube.writes)

    failure = cluster.conflict("b")

    assert (failure.reason, failure.transient) == ("Conflict", False)
    writes = cluster.kube.writes[before:]
    assert {(verb, kind) for verb, kind, _ in writes} == {
        ("patch/status", "ConsumerGroupPolicy"),
        ("create", "Event"),
    }
    assert [name for verb, _, name in writes if verb == "patch/status"] == ["b"]
    assert cluster.owned("b") == NOTHING, "no plan, Lease, account or pod"
    conditions = cluster.conditions("b")
    assert conditions["Ready"][:2] == ("False", "Conflict")
    assert conditions["Stalled"][:2] == ("True", "Conflict")
    assert conditions["Reconciling"][:2] == ("False", "Stalled")
    assert "policy ns/a claims group g" in conditions["Ready"][2]
    assert "totalLag" not in (cluster.kube.policy("ns", "b").get("status") or {}), "no lag read"


def test_a_policy_standing_down_writes_nothing_at_its_next_runs() -> None:
    cluster = Cluster()
    cluster.put(body("a", created=T0))
    cluster.put(body("b", created=T1))
    cluster.conflict("b")
    before = len(cluster.kube.writes)
    cluster.conflict("b")
    assert cluster.kube.writes[before:] == []


def test_the_first_policy_runs_whatever_the_order_of_reconciles() -> None:
    cluster = Cluster()
    cluster.put(body("a", created=T0))
    cluster.put(body("b", created=T1))
    cluster.conflict("b")
    assert cluster.run("a").published
    assert cluster.conditions("a")["Ready"][:2] == ("True", "Reconciled")
    assert cluster.owned("a")["Pod"] == ["a-0", "a-1"]


def test_deleting_the_first_lets_the_later_plan_and_start_its_pods() -> None:
    cluster = Cluster()
    cluster.put(body("a", created=T0))
    cluster.put(body("b", created=T1))
    cluster.run("a")
    cluster.conflict("b")
    cluster.kube.delete("groupops.dev/v1alpha1", "ConsumerGroupPolicy", "ns", "a")

    result = cluster.run("b")

    assert result.published and result.epoch == 1
    assert cluster.owned("b")["Pod"] == ["b-0", "b-1"]
    assert cluster.owned("b")["ConfigMap"] == ["b-plan"]
    assert cluster.conditions("b")["Ready"][:2] == ("True", "Reconciled")
    assert cluster.conditions("b")["Stalled"][:2] == ("False", "AsExpected")


def test_a_policy_edited_into_conflict_stops_its_pods_and_keeps_its_records() -> None:
    cluster = Cluster()
    cluster.put(body("a", created=T0))
    cluster.put(body("b", created=T1, group="h"))
    cluster.run("a")
    assert cluster.run("b").published
    cluster.put(body("b", created=T1, group="g"))

    cluster.conflict("b")

    owned = cluster.owned("b")
    assert owned["Pod"] == [], "the group keeps one owner"
    assert owned["Lease"] == ["b-h-0", "b-h-1"] and owned["ConfigMap"] == ["b-plan"], "records stay"
    status = cluster.kube.policy("ns", "b")["status"]
    assert status["epoch"] == 1, "the floor of the next epoch stays"
    assert not {"members", "replicas", "readyReplicas", "totalLag"} & status.keys()
    assert cluster.owned("a")["Pod"] == ["a-0", "a-1"]


def test_an_earlier_policy_in_another_namespace_wins() -> None:
    cluster = Cluster(namespaces=("team-a", "team-b"))
    cluster.put(body("p", namespace="team-b", created=T0))
    cluster.put(body("p", namespace="team-a", created=T1))
    assert cluster.run("p", "team-b").published
    cluster.conflict("p", "team-a")
    assert "policy team-b/p" in cluster.conditions("p", "team-a")["Ready"][2]


def test_a_dry_run_on_a_group_another_policy_runs_is_shown_and_blocks_nothing() -> None:
    cluster = Cluster()
    cluster.put(body("a", created=T0, dry_run=True))
    cluster.put(body("b", created=T1))
    cluster.put(body("c", created="2025-01-01T10:10:00Z", dry_run=True))
    assert cluster.run("b").published
    for dry in ("a", "c"):
        cluster.run(dry)
        assert cluster.conditions(dry)["Ready"][:2] == ("True", "DryRun")


def test_without_a_claim_index_nothing_is_checked() -> None:
    kube = FakeKube()
    for policy in (body("a", created=T0), body("b", created=T1)):
        kube.put_policy("ns", policy["metadata"]["name"], copy.deepcopy(policy["spec"]))
    deps = Deps(client=kube, settings=Settings(), metrics=Metrics(), events=EventSink(kube))  # type: ignore[arg-type]
    assert reconcile(kube.policy("ns", "b"), deps, PolicyMemory()).published


class CountingKube(FakeKube):
    def __init__(self) -> None:
        super().__init__()
        self.lists = 0

    def list(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        self.lists += 1
        return super().list(*args, **kwargs)


def test_a_synced_index_answers_from_memory_and_an_unsynced_one_lists_and_counts_it() -> None:
    kube, metrics = CountingKube(), Metrics()
    index = PolicyClaims(kube, namespaces=("ns",), metrics=metrics)  # type: ignore[arg-type]
    for policy in (body("a", created=T0), body("b", created=T1)):
        kube.put_policy("ns", policy["metadata"]["name"], policy["spec"])
        kube.objects[("ConsumerGroupPolicy", "ns", policy["metadata"]["name"])]["metadata"][
            "creationTimestamp"
        ] = policy["metadata"]["creationTimestamp"]
        index.note("ADDED", policy)
    later = claim("b", created=T1)

    assert index.first_rival_of(later) == claim("a", created=T0)
    assert kube.lists == 1
    fallbacks = {"kind": "ConsumerGroupPolicy"}
    assert metrics.registry.get_sample_value("groupops_operator_cache_fallbacks_total", fallbacks) == 1

    index._watch._streams[0].synced.set()  # as if the watch's LIST had come back
    assert index.first_rival_of(later) == claim("a", created=T0)
    assert kube.lists == 1, "no request"
