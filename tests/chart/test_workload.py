"""The operator's Deployment: locked down by default (Pod Security Standard "restricted"), named as
nameOverride / fullnameOverride say, extended by extraEnv / extraVolumes / extraVolumeMounts, and
kept available through drains by its PodDisruptionBudget."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.chart_support import Chart, find, named


def pod_of(docs: list[dict[str, Any]]) -> Any:
    return find(docs, "Deployment")["spec"]["template"]["spec"]


def test_security_contexts_are_restricted_by_default(chart: Chart) -> None:
    pod = pod_of(chart.render({}))
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"], (
        "writable /tmp on a read-only root"
    )
    assert not pod.get("hostNetwork") and not pod.get("hostPID")


def test_security_contexts_merge_with_the_defaults_and_null_removes_a_field(chart: Chart) -> None:
    pod = pod_of(
        chart.render(
            {
                "podSecurityContext": {"runAsUser": 2000, "fsGroup": 2000, "runAsGroup": None},
                "securityContext": {"readOnlyRootFilesystem": None},
            }
        )
    )
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 2000,
        "fsGroup": 2000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


@pytest.mark.parametrize(
    ("values", "release", "fullname", "name_label"),
    [
        pytest.param({}, "groupops", "groupops", "groupops", id="release-named-groupops"),
        pytest.param({}, "prod", "prod-groupops", "groupops", id="release-prod"),
        pytest.param({"nameOverride": "cgo"}, "prod", "prod-cgo", "cgo", id="nameOverride"),
        pytest.param(
            {"fullnameOverride": "kafka-groups"}, "prod", "kafka-groups", "groupops", id="fullnameOverride"
        ),
    ],
)
def test_names_follow_name_and_fullname_overrides(
    chart: Chart, values: dict[str, Any], release: str, fullname: str, name_label: str
) -> None:
    docs = chart.render({**values, "scope": "namespaced"}, release=release)
    assert find(docs, "Deployment")["metadata"]["name"] == fullname
    assert find(docs, "ServiceAccount")["metadata"]["name"] == fullname
    services = sorted(s["metadata"]["name"] for s in named(docs, "Service"))
    assert services == [f"{fullname}-heartbeat", f"{fullname}-metrics"]
    roles = sorted(r["metadata"]["name"] for r in named(docs, "Role"))
    assert roles == [fullname, f"{fullname}-election"]
    assert find(docs, "ClusterRole", f"{fullname}-discovery")
    assert find(docs, "ClusterRole", f"{fullname}-view")
    deployment = find(docs, "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": name_label, "app.kubernetes.io/instance": release}
    assert deployment["spec"]["template"]["metadata"]["labels"] == selector
    for service in named(docs, "Service"):
        assert service["spec"]["selector"] == selector
    assert find(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == selector
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--heartbeat-address={fullname}-heartbeat.ops.svc:7946" in args


def test_a_long_release_name_leaves_room_for_suffixes(chart: Chart) -> None:
    release = "a-release-name-of-fifty-three-characters-exactly-1234"
    assert len(release) == 53
    docs = chart.render({}, release=release)
    for doc in docs:
        if doc["kind"] in ("Service", "Deployment", "ServiceAccount"):
            assert len(doc["metadata"]["name"]) <= 63, doc["metadata"]["name"]


def test_extra_env_volumes_and_mounts_are_added(chart: Chart) -> None:
    values = {
        "extraEnv": [
            {"name": "SSL_CERT_FILE", "value": "/etc/corp-ca/ca.crt"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "k"}}},
        ],
        "extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca"}}],
        "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/corp-ca", "readOnly": True}],
    }
    pod = pod_of(chart.render(values))
    container = pod["containers"][0]
    env = container["env"]
    assert [e["name"] for e in env] == ["POD_NAME", "POD_NAMESPACE", "POD_IP", "SSL_CERT_FILE", "TOKEN"]
    assert env[-1] == values["extraEnv"][1]
    assert pod["volumes"][0]["name"] == "tmp"
    assert pod["volumes"][1:] == values["extraVolumes"]
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}, *values["extraVolumeMounts"]]

    plain = pod_of(chart.render({}))
    assert [e["name"] for e in plain["containers"][0]["env"]] == ["POD_NAME", "POD_NAMESPACE", "POD_IP"]
    assert [v["name"] for v in plain["volumes"]] == ["tmp"]


def test_pod_disruption_budget_keeps_one_replica_through_drains(chart: Chart) -> None:
    docs = chart.render({})
    budget = find(docs, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == find(docs, "Deployment")["spec"]["selector"]
    percent = find(chart.render({"podDisruptionBudget": {"minAvailable": "50%"}}), "PodDisruptionBudget")
    assert percent["spec"]["minAvailable"] == "50%"
    assert not named(chart.render({"replicas": 1}), "PodDisruptionBudget"), "one replica: a PDB blocks drains"
    assert not named(chart.render({"podDisruptionBudget": {"enabled": False}}), "PodDisruptionBudget")


def test_every_object_of_the_release_is_labelled_with_it(chart: Chart) -> None:
    values = {
        "watchNamespaces": ["team-a"],
        "kafkaAuthSecrets": [{"namespace": "team-a", "name": "kafka-auth"}],
    }
    for doc in chart.render(values):
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "groupops", doc["metadata"]["name"]
        assert labels["helm.sh/chart"].startswith("groupops-")


def test_the_guard_allows_nothing_risky_unless_its_values_say_so(chart: Chart) -> None:
    def guard_args(values: dict[str, Any]) -> list[str]:
        (container,) = pod_of(chart.render(values))["containers"]
        return [arg for arg in container["args"] if arg.startswith("--allow")]

    assert guard_args({}) == []
    allowed = {
        "guard": {
            "allowPrivileged": True,
            "allowRunAsRoot": True,
            "allowHostNamespaces": True,
            "allowHostPath": True,
            "allowedVolumeTypes": ["nfs"],
            "allowedImageRegistries": ["registry.example.com/team", "ghcr.io/acme"],
            "allowedKafkaProperties": ["ssl.ca.location"],
            "allowedBootstrapServers": ["*.kafka.example.com:9093"],
            "allowedLagSourceUrls": ["http://prometheus.monitoring.svc:9090"],
        }
    }
    assert guard_args(allowed) == [
        "--allow-privileged",
        "--allow-run-as-root",
        "--allow-host-namespaces",
        "--allow-host-path",
        "--allow-volume-type=nfs",
        "--allowed-image-registries=registry.example.com/team",
        "--allowed-image-registries=ghcr.io/acme",
        "--allow-kafka-property=ssl.ca.location",
        "--allowed-bootstrap-servers=*.kafka.example.com:9093",
        "--allowed-lag-source-urls=http://prometheus.monitoring.svc:9090",
    ]
    refusal = chart.refusal({"guard": {"allowHostPid": True}})
    assert "'/guard'" in refusal and "'allowHostPid' not allowed" in refusal, refusal


def test_a_heartbeat_interval_reaches_the_operator_only_when_set(chart: Chart) -> None:
    def args(values: dict[str, Any]) -> list[str]:
        return list(pod_of(chart.render(values))["containers"][0]["args"])

    assert not [a for a in args({}) if a.startswith("--heartbeat-interval")]
    assert "--heartbeat-interval=2.5" in args({"heartbeats": {"intervalSeconds": 2.5}})
    assert not [
        a
        for a in args({"heartbeats": {"enabled": False, "intervalSeconds": 2.5}})
        if a.startswith("--heartbeat-interval")
    ]


def test_the_fallback_write_budget_reaches_the_operator_with_heartbeats(chart: Chart) -> None:
    def args(values: dict[str, Any]) -> list[str]:
        return list(pod_of(chart.render(values))["containers"][0]["args"])

    assert "--fallback-writes-per-second=200" in args({})
    assert "--fallback-writes-per-second=0" in args({"heartbeats": {"fallbackWritesPerSecond": 0}})
    assert not [
        a for a in args({"heartbeats": {"enabled": False}}) if a.startswith("--fallback-writes-per-second")
    ]


def test_the_status_figures_interval_reaches_the_operator(chart: Chart) -> None:
    def args(values: dict[str, Any]) -> list[str]:
        return list(pod_of(chart.render(values))["containers"][0]["args"])

    assert "--status-figures-interval=30" in args({})
    assert "--status-figures-interval=120" in args({"operator": {"statusFiguresSeconds": 120}})
