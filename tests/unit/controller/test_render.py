"""Render functions: pure dicts of exactly what the operator creates."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from groupops.controller import render_pods, render_rbac
from groupops.controller.render_common import PolicyRef
from groupops.controller.render_plan import read_plan_configmap, render_plan_configmap
from groupops.controller.settings import ConsumerSettings
from groupops.controller.spec import parse_policy
from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.plan_format import PublishedPlan, Release
from groupops.planner.wire import lease_name

POLICY = PolicyRef(namespace="team-a", name="orders", uid="uid-1", generation=3)
SPEC: dict[str, Any] = {
    "kafka": {
        "bootstrapServers": "k:9092",
        "authSecretRef": {"name": "kafka-auth"},
        "properties": {"client.rack": "a"},
    },
    "groupId": "orders-processor",
    "topics": ["orders", "refunds"],
    "lagSource": {"type": "static", "static": {"lags": {"orders": [1, 2]}}},
    "consumers": {
        "replicas": 2,
        "template": {
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "containers": [
                    {"name": "consumer", "image": "me/consumer:1", "env": [{"name": "X", "value": "1"}]}
                ]
            },
        },
    },
}


def pod(spec: dict[str, Any] = SPEC, ordinal: int = 1, zone: str | None = None) -> dict[str, Any]:
    return render_pods.render_pod(
        POLICY,
        parse_policy(spec),
        render_pods.Slot(ordinal=ordinal, identity=f"orders-processor-{ordinal}", zone=zone),
        settings=ConsumerSettings(),
        lease_seconds=10,
    )


def env_of(rendered: dict[str, Any]) -> dict[str, Any]:
    container = rendered["spec"]["containers"][0]
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def test_pod_carries_identity_policy_and_kafka_settings() -> None:
    env = env_of(pod())
    assert env["GROUPOPS_POLICY"] == "orders"
    assert env["GROUPOPS_IDENTITY"] == "orders-processor-1"
    assert env["GROUPOPS_GROUP_ID"] == "orders-processor"
    assert env["GROUPOPS_TOPICS"] == "orders,refunds"
    assert env["GROUPOPS_KAFKA_BOOTSTRAP_SERVERS"] == "k:9092"
    assert env["GROUPOPS_KAFKA_PROPERTIES"] == '{"client.rack":"a"}'
    assert env["GROUPOPS_PLAN_CONFIGMAP"] == "orders-plan"
    assert env["GROUPOPS_LEASE_NAME"] == lease_name("orders", "orders-processor-1")
    assert env["GROUPOPS_KAFKA_AUTH_DIR"] == render_pods.AUTH_MOUNT_PATH
    assert env["X"] == "1", "the template's own environment stays"


def test_pod_serves_consumer_metrics_unless_its_template_says_where() -> None:
    rendered = pod()
    env = env_of(rendered)
    assert (env["GROUPOPS_METRICS_PORT"], env["GROUPOPS_METRICS_HOST"]) == ("9400", "0.0.0.0")
    assert rendered["spec"]["containers"][0]["ports"] == [{"name": "metrics", "containerPort": 9400}]
    own = copy.deepcopy(SPEC)
    own["consumers"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "GROUPOPS_METRICS_PORT", "value": "0"}
    )
    chosen = pod(own)
    assert env_of(chosen)["GROUPOPS_METRICS_PORT"] == "0"
    assert "GROUPOPS_METRICS_HOST" not in env_of(chosen)
    assert "ports" not in chosen["spec"]["containers"][0]


def test_pod_mounts_the_auth_secret_by_reference() -> None:
    rendered = pod()
    volumes = {v["name"]: v for v in rendered["spec"]["volumes"]}
    assert volumes["groupops-kafka-auth"]["secret"]["secretName"] == "kafka-auth"
    mounts = rendered["spec"]["containers"][0]["volumeMounts"]
    assert mounts == [
        {"name": "groupops-kafka-auth", "mountPath": render_pods.AUTH_MOUNT_PATH, "readOnly": True}
    ]


def test_pod_is_owned_labelled_and_runs_as_the_consumer_account() -> None:
    rendered = pod()
    meta = rendered["metadata"]
    assert meta["name"] == "orders-1"
    assert meta["ownerReferences"][0]["uid"] == "uid-1"
    assert meta["ownerReferences"][0]["controller"] is True
    assert meta["labels"]["groupops.dev/policy"] == "orders"
    assert meta["labels"]["groupops.dev/ordinal"] == "1"
    assert meta["labels"]["team"] == "a"
    assert meta["annotations"]["groupops.dev/identity"] == "orders-processor-1"
    assert rendered["spec"]["serviceAccountName"] == "orders-consumer-1", "each ordinal its own account"
    assert rendered["spec"]["containers"][0]["image"] == "me/consumer:1"


def test_rendering_is_pure_and_deterministic() -> None:
    before = copy.deepcopy(SPEC)
    assert pod() == pod()
    assert before == SPEC


def test_template_hash_follows_the_template_not_the_identity() -> None:
    changed = copy.deepcopy(SPEC)
    changed["consumers"]["template"]["spec"]["containers"][0]["image"] = "me/consumer:2"
    label = "groupops.dev/template-hash"
    assert pod(ordinal=0)["metadata"]["labels"][label] == pod(ordinal=1)["metadata"]["labels"][label]
    assert pod(changed)["metadata"]["labels"][label] != pod()["metadata"]["labels"][label]


def test_pod_carries_the_max_poll_interval_and_a_change_replaces_the_pods() -> None:
    assert env_of(pod())["GROUPOPS_MAX_POLL_INTERVAL_SECONDS"] == "300", "Kafka's default"
    short = copy.deepcopy(SPEC)
    short["consumers"]["maxPollIntervalSeconds"] = 30
    assert env_of(pod(short))["GROUPOPS_MAX_POLL_INTERVAL_SECONDS"] == "30"
    label = "groupops.dev/template-hash"
    assert pod(short)["metadata"]["labels"][label] != pod()["metadata"]["labels"][label]


def test_a_heartbeat_interval_is_rendered_only_when_set_so_an_upgrade_without_one_rolls_nothing() -> None:
    def rendered(settings: ConsumerSettings) -> dict[str, Any]:
        slot = render_pods.Slot(ordinal=0, identity="orders-processor-0", zone=None)
        return render_pods.render_pod(POLICY, parse_policy(SPEC), slot, settings=settings, lease_seconds=10)

    label = "groupops.dev/template-hash"
    beating = ConsumerSettings(heartbeat_addresses=("op.svc:7946",))
    slower = ConsumerSettings(heartbeat_addresses=("op.svc:7946",), heartbeat_interval_seconds=2.5)
    assert "GROUPOPS_HEARTBEAT_INTERVAL_SECONDS" not in env_of(rendered(beating))
    assert env_of(rendered(slower))["GROUPOPS_HEARTBEAT_INTERVAL_SECONDS"] == "2.5"
    assert rendered(slower)["metadata"]["labels"][label] != rendered(beating)["metadata"]["labels"][label]


@pytest.mark.parametrize(
    ("interval", "lease", "refused"),
    [
        (None, 4, None),
        (1.0, 4, None),
        (1.9, 4, None),
        (2.0, 4, "less than 2 s"),
        (0.9, 4, "at least 1 s"),
        (0.5, 2, None),
        (0.4, 2, "at least 0.5 s"),
        (7.0, 15, None),
        (7.5, 15, "less than 7.5 s"),
    ],
)
def test_a_heartbeat_interval_must_leave_a_grant_a_quarter_lease_beyond_the_next_heartbeat(
    interval: float | None, lease: int, refused: str | None
) -> None:
    settings = ConsumerSettings(heartbeat_addresses=("op.svc:7946",), heartbeat_interval_seconds=interval)
    if refused is None:
        settings.check_heartbeat_interval(lease)
    else:
        with pytest.raises(ValueError, match=refused):
            settings.check_heartbeat_interval(lease)


def test_a_heartbeat_interval_without_heartbeats_is_refused() -> None:
    with pytest.raises(ValueError, match="needs heartbeats"):
        ConsumerSettings(heartbeat_interval_seconds=2.0)


def test_pods_start_latest_from_the_policys_creation_and_carry_only_the_error_policy_it_sets() -> None:
    created = PolicyRef(namespace="team-a", name="orders", uid="uid-1", created="2026-11-25T09:00:00Z")
    rendered = render_pods.render_pod(
        created,
        parse_policy(SPEC),
        render_pods.Slot(ordinal=0, identity="orders-processor-0"),
        settings=ConsumerSettings(),
        lease_seconds=10,
    )
    env = env_of(rendered)
    assert env["GROUPOPS_GROUP_STARTED"] == "2026-11-25T09:00:00Z"
    assert not any(name.startswith("GROUPOPS_ON_ERROR") for name in env_of(pod())), "defaults: the runtime's"
    dead_letters = copy.deepcopy(SPEC)
    dead_letters["consumers"]["onError"] = {
        "action": "deadLetter",
        "deadLetterTopic": "orders.dlq",
        "retries": 1,
    }
    env = env_of(pod(dead_letters))
    assert env["GROUPOPS_ON_ERROR_ACTION"] == "deadLetter"
    assert env["GROUPOPS_DEAD_LETTER_TOPIC"] == "orders.dlq"
    assert env["GROUPOPS_ON_ERROR_RETRIES"] == "1"
    assert "GROUPOPS_ON_ERROR_BACKOFF_SECONDS" not in env
    label = "groupops.dev/template-hash"
    assert pod(dead_letters)["metadata"]["labels"][label] != pod()["metadata"]["labels"][label]


def test_default_container_when_the_template_has_none() -> None:
    bare = copy.deepcopy(SPEC)
    del bare["consumers"]["template"]
    container = pod(bare)["spec"]["containers"][0]
    assert container["name"] == "consumer"
    assert container["image"] == ConsumerSettings().image
    assert container["command"] == ["groupops", "consume"]


def test_zone_becomes_required_node_affinity() -> None:
    rack = copy.deepcopy(SPEC)
    rack["strategy"] = {"rackAware": True}
    rack["consumers"]["zones"] = ["z1", "z2"]
    terms = pod(rack, zone="z2")["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z2"]}]}
    ]


def test_role_allows_only_the_plan_and_the_replicas_own_lease() -> None:
    role = render_rbac.render_role(POLICY, 1, "orders-a")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["orders-plan"],
            "verbs": ["get", "watch"],
        },
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["orders-a"],
            "verbs": ["get", "update"],
        },
    ]
    assert role["metadata"]["name"] == "orders-consumer-1"
    binding = render_rbac.render_role_binding(POLICY, 1)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "orders-consumer-1", "namespace": "team-a"}
    ]
    account = render_rbac.render_service_account(POLICY, 1)
    assert account["metadata"]["name"] == "orders-consumer-1"
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_plan_configmap_round_trips_with_the_operators_notes() -> None:
    plan = Plan(
        epoch=7,
        strategy="lag",
        assignment={
            MemberId("orders-processor-0"): (TopicPartition("orders", 0),),
            MemberId("orders-processor-1"): (),
        },
    )
    published = PublishedPlan(
        plan=plan,
        releasing={TopicPartition("orders", 1): Release(identity=MemberId("orders-processor-1"), epoch=7)},
    )
    configmap = render_plan_configmap(POLICY, published, generation=3, members=["orders-processor-0"])
    assert configmap["metadata"]["name"] == "orders-plan"
    assert configmap["data"]["epoch"] == "7"
    assert configmap["data"]["orders-processor-0"] == '[["orders",0]]'
    assert configmap["data"]["orders-processor-1"] == "[]"
    observed = read_plan_configmap(configmap)
    assert observed is not None
    assert observed.published == published
    assert observed.generation == 3
    assert observed.members == frozenset({"orders-processor-0"})


def test_lease_is_created_unheld() -> None:
    lease = render_pods.render_lease(POLICY, "orders-processor-0", lease_seconds=10)
    assert lease["spec"] == {"leaseDurationSeconds": 10}
    assert lease["metadata"]["name"] == lease_name("orders", "orders-processor-0")
