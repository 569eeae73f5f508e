"""ConsumerGroupCluster through the reconcile's steps, against the in-memory API: a policy that
names a cluster takes its brokers, properties and operator Secret; a missing, invalid or
forbidding cluster refuses it with a reason; the cluster's disruption budget holds a chosen
rebalance (PlanApplied=False, WaitingForBudget) but never a first plan; the fleet status sums
the policies."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from groupops.controller.cluster_spec import CLUSTER_DEFAULTED, parse_cluster, with_policy_defaults
from groupops.controller.clusters import CLUSTER_KIND, ClusterBook
from groupops.controller.events import EventSink
from groupops.controller.metrics import Metrics
from groupops.controller.reconcile import Deps, PolicyMemory, ReconcileFailure, reconcile
from groupops.controller.settings import Settings
from groupops.controller.spec import SpecError, parse_policy
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.test_reconcile_steps import Clock

API = "groupops.dev/v1alpha1"
CRDS = Path(__file__).resolve().parents[3] / "crds"


def crd_spec_schema(name: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / f"{name}.yaml").read_text())
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])


def put_cluster(kube: FakeKube, name: str, spec: dict[str, Any]) -> None:
    kube.objects.pop((CLUSTER_KIND, "", name), None)
    kube.create(
        {"apiVersion": API, "kind": CLUSTER_KIND, "metadata": {"name": name, "generation": 1}, "spec": spec}
    )


def policy(lags: list[int], *, cluster: str = "prod", group: str = "g", **kafka: Any) -> dict[str, Any]:
    return {
        "kafka": {"clusterRef": {"name": cluster}, **kafka},
        "groupId": group,
        "topics": ["t"],
        "strategy": {"type": "balanced"},
        "lagSource": {"type": "static", "static": {"lags": {"t": lags}}},
        "consumers": {"replicas": 2},
        "rebalance": {"interval": "1h", "cooldownSeconds": 0, "minImprovement": 0},
    }


class Fleet:
    """One in-memory API, one ClusterBook on the test's clock, a memory per policy."""

    def __init__(self) -> None:
        self.kube, self.clock = FakeKube(), Clock()
        self.book = ClusterBook(self.kube, clock=self.wall_seconds)  # type: ignore[arg-type]
        self.memories: dict[str, PolicyMemory] = {}
        self.deps = Deps(
            client=self.kube,  # type: ignore[arg-type]
            settings=Settings(),
            metrics=Metrics(),
            events=EventSink(self.kube),  # type: ignore[arg-type]
            wall_clock=self.clock,
            clusters=self.book,
        )

    def wall_seconds(self) -> float:
        return self.clock.now.timestamp()

    def run(self, name: str) -> Any:
        memory = self.memories.setdefault(name, PolicyMemory())
        return reconcile(self.kube.policy("ns", name), self.deps, memory)

    def conditions(self, name: str) -> dict[str, tuple[str, str, str]]:
        status = self.kube.policy("ns", name)["status"]
        return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def test_a_policy_takes_brokers_properties_and_the_operator_secret_from_its_cluster() -> None:
    fleet = Fleet()
    put_cluster(
        fleet.kube,
        "prod",
        {
            "bootstrapServers": "broker-1:9093,broker-2:9093",
            "properties": {"security.protocol": "SASL_SSL", "client.rack": "a"},
            "operatorAuthSecretRef": {"namespace": "groupops", "name": "operator-kafka"},
        },
    )
    fleet.kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "operator-kafka", "namespace": "groupops"},
            "data": {"sasl.username": base64.b64encode(b"groupops").decode()},
        }
    )
    fleet.kube.put_policy("ns", "p", policy([5, 5, 5, 5], properties={"client.rack": "b"}))
    assert fleet.run("p").published
    pod = fleet.kube.get("v1", "Pod", "ns", "p-0")
    assert pod is not None
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["GROUPOPS_KAFKA_BOOTSTRAP_SERVERS"] == "broker-1:9093,broker-2:9093"
    resolved = fleet.book.resolve(("ns", "p"), parse_policy(policy([1], properties={"client.rack": "b"})))
    assert resolved.kafka.properties == {"security.protocol": "SASL_SSL", "client.rack": "b"}
    assert resolved.kafka.operator_auth == ("groupops", "operator-kafka")


@pytest.mark.parametrize(
    ("cluster", "reason", "in_message"),
    [
        pytest.param(
            None, "ClusterNotFound", "'prod' (spec.kafka.clusterRef.name) does not exist", id="missing"
        ),
        pytest.param(
            {"bootstrapServers": "k:9092", "disruptionBudget": {"maxHandoffsInFlight": 0}},
            "ClusterInvalid",
            "spec.disruptionBudget.maxHandoffsInFlight",
            id="invalid",
        ),
        pytest.param(
            {"bootstrapServers": "k:9092", "allowedNamespaces": ["team-a"]},
            "ClusterNotAllowed",
            "does not list namespace 'ns' in spec.allowedNamespaces",
            id="not-allowed",
        ),
        pytest.param(
            {
                "bootstrapServers": "k:9092",
                "operatorAuthSecretRef": {"namespace": "groupops", "name": "nope"},
            },
            "AuthSecretMissing",
            "spec.operatorAuthSecretRef of ConsumerGroupCluster prod",
            id="operator-secret-missing",
        ),
    ],
)
def test_a_cluster_that_cannot_be_used_refuses_the_policy_with_a_reason(
    cluster: dict[str, Any] | None, reason: str, in_message: str
) -> None:
    fleet = Fleet()
    if cluster is not None:
        put_cluster(fleet.kube, "prod", cluster)
    fleet.kube.put_policy("ns", "p", policy([5, 5]))
    with pytest.raises(ReconcileFailure) as failure:
        fleet.run("p")
    assert failure.value.reason == reason
    ready = fleet.conditions("p")["Ready"]
    assert ready[:2] == ("False", reason) and in_message in ready[2]
    assert fleet.kube.names("Pod") == []


def test_a_namespace_listed_or_a_star_may_use_the_cluster() -> None:
    assert parse_cluster({"bootstrapServers": "k:1", "allowedNamespaces": ["ns"]}).allows("ns")
    assert parse_cluster({"bootstrapServers": "k:1", "allowedNamespaces": ["*"]}).allows("any")
    assert parse_cluster({"bootstrapServers": "k:1"}).allows("any")
    assert not parse_cluster({"bootstrapServers": "k:1", "allowedNamespaces": []}).allows("ns")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param({}, "spec.bootstrapServers", id="no-brokers"),
        pytest.param({"bootstrapServers": "a b"}, "spec.bootstrapServers", id="brokers-pattern"),
        pytest.param({"bootstrapServers": "k:1", "typo": 1}, "spec.typo", id="unknown-field"),
        pytest.param(
            {"bootstrapServers": "k:1", "properties": {"sasl.password": "x"}},
            "spec.properties.sasl.password",
            id="secret-in-properties",
        ),
        pytest.param(
            {"bootstrapServers": "k:1", "allowedNamespaces": ["Team_A"]},
            "spec.allowedNamespaces",
            id="ns-name",
        ),
        pytest.param(
            {"bootstrapServers": "k:1", "disruptionBudget": {"maxPartitionsMovedPerMinute": -1}},
            "spec.disruptionBudget.maxPartitionsMovedPerMinute",
            id="negative-rate",
        ),
        pytest.param(
            {"bootstrapServers": "k:1", "policyDefaults": {"rebalance": {"cooldownSeconds": -1}}},
            "spec.policyDefaults.rebalance.cooldownSeconds",
            id="default-out-of-bounds",
        ),
        pytest.param(
            {"bootstrapServers": "k:1", "policyDefaults": {"consumers": {"maxPollIntervalSeconds": 2}}},
            "spec.policyDefaults.consumers.maxPollIntervalSeconds",
            id="default-below-the-policys-minimum",
        ),
        pytest.param(
            {"bootstrapServers": "k:1", "policyDefaults": {"strategy": {"type": "lag"}}},
            "spec.policyDefaults.strategy",
            id="not-a-defaultable-field",
        ),
    ],
)
def test_a_bad_cluster_spec_names_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_cluster(spec)
    assert error.value.field.startswith(field)


def test_a_policy_needs_exactly_one_of_brokers_and_cluster() -> None:
    both = policy([1], bootstrapServers="k:9092")
    neither = {**policy([1]), "kafka": {}}
    for spec in (both, neither):
        with pytest.raises(SpecError) as error:
            parse_policy(spec)
        assert "exactly one of bootstrapServers and clusterRef" in str(error.value)


def test_the_budget_holds_a_chosen_rebalance_until_the_minute_allows_it_but_never_a_first_plan() -> None:
    fleet = Fleet()
    put_cluster(
        fleet.kube,
        "prod",
        {"bootstrapServers": "k:9092", "disruptionBudget": {"maxPartitionsMovedPerMinute": 1}},
    )
    for name in ("p", "q"):
        fleet.kube.put_policy("ns", name, policy([1, 1, 1, 1], group=name))
        assert fleet.run(name).trigger == "Initial"  # never held, even past the allowance
    fleet.clock.advance(61)
    for name in ("p", "q"):  # both hot partitions on one replica: worth a move each
        members = fleet.kube.policy("ns", name)["status"]["members"]
        hot = [int(tp.rsplit("-", 1)[1]) for tp in members[0]["partitions"]]
        lags = [10] * 4
        for partition in hot:
            lags[partition] = 300
        fleet.kube.put_policy("ns", name, policy(lags, group=name))
    first = fleet.run("p")
    assert first.published and first.trigger == "ImbalanceExceeded"
    second = fleet.run("q")
    assert not second.published
    applied = fleet.conditions("q")["PlanApplied"]
    assert applied[:2] == ("False", "WaitingForBudget")
    assert "maxPartitionsMovedPerMinute" in applied[2] and "ConsumerGroupCluster prod" in applied[2]
    fleet.clock.advance(30)
    assert not fleet.run("q").published  # still within the minute
    fleet.clock.advance(31)
    later = fleet.run("q")
    assert later.published and later.trigger == "ImbalanceExceeded"
    assert fleet.conditions("q")["PlanApplied"][:2] == ("True", "Published")


def test_the_fleet_status_sums_its_policies_and_says_who_waits() -> None:
    fleet = Fleet()
    put_cluster(
        fleet.kube, "prod", {"bootstrapServers": "k:9092", "disruptionBudget": {"maxHandoffsInFlight": 2}}
    )
    fleet.kube.put_policy("ns", "p", policy([10, 20, 30, 40], group="a"))
    fleet.kube.put_policy("ns", "q", policy([1, 1], group="b"))
    fleet.run("p")
    fleet.run("q")
    assert fleet.book.report_once() == 1
    status = fleet.kube.get(API, CLUSTER_KIND, None, "prod")["status"]  # type: ignore[index]
    assert status["policies"] == 2 and status["groups"] == 2
    assert status["totalLag"] == 102
    assert status["handoffsInFlight"] == 0 and status["waitingForBudget"] == 0
    assert status["budgetUsed"] == {"handoffs": "0/2"}
    assert status["imbalance"]["max"] >= status["imbalance"]["p50"] >= 1.0
    assert status["worstPolicy"] in ("ns/p", "ns/q")
    assert [c["type"] for c in status["conditions"]] == ["Ready"]
    assert fleet.book.report_once() == 0, "nothing changed: no second write"
    fleet.book.forget(("ns", "q"))
    assert fleet.book.report_once() == 1
    assert fleet.kube.get(API, CLUSTER_KIND, None, "prod")["status"]["policies"] == 1  # type: ignore[index]


def test_a_deleted_cluster_leaves_no_budget_and_no_series() -> None:
    kube, metrics = FakeKube(), Metrics()
    book = ClusterBook(kube, metrics=metrics)  # type: ignore[arg-type]
    body = {"metadata": {"name": "prod", "generation": 1}, "spec": {"bootstrapServers": "k:9092"}}
    book.note("ADDED", body)
    book.status_of("prod")
    assert metrics.registry.get_sample_value("groupops_cluster_handoffs_in_flight", {"cluster": "prod"}) == 0
    book.note("DELETED", body)
    assert (
        metrics.registry.get_sample_value("groupops_cluster_handoffs_in_flight", {"cluster": "prod"}) is None
    )
    assert book.report_once() == 0


def rendered_env(fleet: Fleet, name: str) -> dict[str, Any]:
    pod = fleet.kube.get("v1", "Pod", "ns", f"{name}-0")
    assert pod is not None
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_a_policy_takes_the_clusters_defaults_for_what_it_leaves_unset() -> None:
    fleet = Fleet()
    defaults = {"rebalance": {"cooldownSeconds": 600}, "consumers": {"maxPollIntervalSeconds": 45}}
    put_cluster(fleet.kube, "prod", {"bootstrapServers": "k:9092", "policyDefaults": defaults})
    unset = policy([5, 5])
    del unset["rebalance"]["cooldownSeconds"]
    fleet.kube.put_policy("ns", "unset", unset)
    written = policy([5, 5], group="h")
    written["consumers"]["maxPollIntervalSeconds"] = 90
    fleet.kube.put_policy("ns", "written", written)
    assert fleet.run("unset").published and fleet.run("written").published
    assert rendered_env(fleet, "unset")["GROUPOPS_MAX_POLL_INTERVAL_SECONDS"] == "45"
    assert rendered_env(fleet, "written")["GROUPOPS_MAX_POLL_INTERVAL_SECONDS"] == "90", (
        "the policy's own wins"
    )
    inline = {**policy([5, 5], group="i"), "kafka": {"bootstrapServers": "k:9092"}}
    fleet.kube.put_policy("ns", "inline", inline)
    assert fleet.run("inline").published
    assert rendered_env(fleet, "inline")["GROUPOPS_MAX_POLL_INTERVAL_SECONDS"] == "300", (
        "no cluster: no defaults"
    )


def test_cluster_defaults_merge_under_the_policy_key_by_key() -> None:
    defaults = {"rebalance": {"interval": "5m", "cooldownSeconds": 600}, "targetTimeLagSeconds": 30}
    merged = with_policy_defaults(defaults, {"rebalance": {"cooldownSeconds": 0}, "groupId": "g"})
    assert merged == {
        "rebalance": {"interval": "5m", "cooldownSeconds": 0},
        "targetTimeLagSeconds": 30,
        "groupId": "g",
    }
    spec = parse_policy({**policy([1]), "rebalance": {}, "kafka": {"clusterRef": {"name": "prod"}}})
    with_defaults = parse_policy(with_policy_defaults(defaults, {**policy([1]), "rebalance": {}}))
    assert (spec.rebalance.interval_seconds, spec.rebalance.cooldown_seconds) == (60.0, 30)
    assert (with_defaults.rebalance.interval_seconds, with_defaults.rebalance.cooldown_seconds) == (
        300.0,
        600,
    )
    assert with_defaults.target_time_lag_seconds == 30


def test_the_defaultable_fields_have_no_policy_schema_default_and_the_same_bounds_on_the_cluster() -> None:
    policy_schema = crd_spec_schema("consumergrouppolicy")
    cluster_schema = crd_spec_schema("consumergroupcluster")["policyDefaults"]["properties"]
    for path in [p for p in CLUSTER_DEFAULTED if p != ("lagSource",)]:
        in_policy, in_cluster = policy_schema, cluster_schema
        for key in path[:-1]:
            in_policy, in_cluster = in_policy[key]["properties"], in_cluster[key]["properties"]
        field_p, field_c = in_policy[path[-1]], in_cluster[path[-1]]
        assert "default" not in field_p, f"{path}: a schema default hides 'unset' from the operator"
        assert {k: v for k, v in field_p.items() if k != "description"} == {
            k: v for k, v in field_c.items() if k != "description"
        }, path


def without_words(node: Any) -> Any:
    """A schema without its prose (descriptions, rule messages), to compare what it accepts."""
    if isinstance(node, dict):
        return {k: without_words(v) for k, v in node.items() if k not in ("description", "message")}
    if isinstance(node, list):
        return [without_words(item) for item in node]
    return node


def test_the_clusters_lag_source_default_accepts_what_a_policys_does_but_static() -> None:
    in_policy = copy.deepcopy(crd_spec_schema("consumergrouppolicy")["lagSource"])
    in_cluster = crd_spec_schema("consumergroupcluster")["policyDefaults"]["properties"]["lagSource"]
    assert "default" not in in_policy, "a schema default hides 'unset' from the operator"
    del in_policy["properties"]["static"]
    in_policy["properties"]["type"]["enum"].remove("static")
    in_policy["x-kubernetes-validations"] = [
        rule for rule in in_policy["x-kubernetes-validations"] if "static" not in rule["rule"]
    ]
    assert without_words(in_cluster) == without_words(in_policy)


def test_a_policy_without_a_lag_source_reads_lag_where_its_cluster_says() -> None:
    fleet = Fleet()
    prometheus = {"type": "prometheus", "prometheus": {"url": "http://127.0.0.1:9", "timeoutSeconds": 1}}
    put_cluster(
        fleet.kube, "prod", {"bootstrapServers": "k:9092", "policyDefaults": {"lagSource": prometheus}}
    )
    spec = policy([5, 5])
    del spec["lagSource"]
    fleet.kube.put_policy("ns", "p", spec)
    with pytest.raises(ReconcileFailure):
        fleet.run("p")
    _, reason, message = fleet.conditions("p")["Ready"]
    assert reason == "LagSourceUnavailable" and "127.0.0.1:9" in message, message
    fleet.kube.put_policy("ns", "own", policy([5, 5], group="h"))  # its own static source wins whole
    assert fleet.run("own").published
