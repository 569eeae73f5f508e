"""The Helm chart, rendered by helm (built from its Go module), is accepted by the real API
server in a server-side dry run, in both RBAC modes; and the operator's Deployment is locked
down (non-root, read-only root filesystem, no capabilities, probes on kopf's health endpoint)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from tests.e2e.operator_support import CHART, Kubectl, create_namespace, kubetool

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]


def render(namespace: str, *values: str) -> str:
    args = [
        str(kubetool("helm")),
        "template",
        "groupops",
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        "1.33.13",
        "--include-crds",
    ]
    for value in values:
        args += ["--set", value]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def kubectl(kube_config: str) -> Kubectl:
    return Kubectl(kube_config)


@pytest.mark.parametrize(
    "values",
    [
        pytest.param((), id="defaults"),
        pytest.param(("scope=cluster",), id="cluster-wide"),
        pytest.param(("metrics.service.enabled=false", "operator.verbose=true"), id="no-metrics-service"),
        pytest.param(
            (
                "scope=namespaced",
                "watchNamespaces={{{ns}}}",
                "kafkaAuthSecrets[0].namespace={ns}",
                "kafkaAuthSecrets[0].name=kafka-auth",
                "fullnameOverride=cgo",
                "crds.install=false",
                "argocd.healthCheck.enabled=true",
                "extraEnv[0].name=SSL_CERT_FILE",
                "extraEnv[0].value=/etc/corp-ca/ca.crt",
                "extraVolumes[0].name=corp-ca",
                "extraVolumes[0].configMap.name=corp-ca",
                "extraVolumeMounts[0].name=corp-ca",
                "extraVolumeMounts[0].mountPath=/etc/corp-ca",
            ),
            id="namespaced-auth-secret-overrides",
        ),
    ],
)
def test_chart_is_accepted_by_the_api_server(
    kubectl: Kubectl, unique_name: Any, values: tuple[str, ...]
) -> None:
    namespace = unique_name("chart")
    create_namespace(kubectl, namespace)
    manifest = render(namespace, *(value.format(ns=namespace) for value in values))
    result = kubectl.run("apply", "--dry-run=server", "-n", namespace, "-f", "-", stdin=manifest, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith(("deployment.apps/groupops ", "deployment.apps/cgo ")) for line in lines), (
        result.stdout
    )
    assert all("(server dry run)" in line for line in lines), result.stdout


def test_deployment_is_locked_down() -> None:
    documents = [d for d in yaml.safe_load_all(render("ops")) if d]
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["limits"]["memory"]
    assert container["args"][0] == "operator"
    kinds = sorted(d["kind"] for d in documents)
    assert kinds == [
        "ClusterRole",  # -discovery: kopf lists namespaces and CRDs
        "ClusterRole",  # -clusters: ConsumerGroupClusters, read, and their status written
        "ClusterRole",  # -view, -edit, -admin: aggregated into Kubernetes' user roles
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterRoleBinding",
        "CustomResourceDefinition",  # ConsumerGroupPolicy
        "CustomResourceDefinition",  # ConsumerGroupCluster
        "Deployment",
        "PodDisruptionBudget",
        "Role",  # the operator's, in the release namespace (scope namespaced, the default)
        "Role",  # the election Lease
        "RoleBinding",
        "RoleBinding",
        "Service",  # heartbeats
        "Service",  # metrics
        "ServiceAccount",
    ]
    rules = [rule for d in documents if d["kind"] in ("ClusterRole", "Role") for rule in d["rules"]]
    assert not [r for r in rules if "secrets" in r["resources"]], (
        "no Secret is readable unless listed in kafkaAuthSecrets (tests/chart/test_rbac.py)"
    )


def test_two_replicas_elect_a_leader_spread_apart_and_keep_one_through_a_drain() -> None:
    documents = [d for d in yaml.safe_load_all(render("ops")) if d]
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = deployment["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--leader-namespace=ops" in args
    assert "--leader-lease-name=groupops-operator" in args
    spread = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert {term["podAffinityTerm"]["topologyKey"] for term in spread} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    budget = next(d for d in documents if d["kind"] == "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    election = next(
        d for d in documents if d["kind"] == "Role" and d["metadata"]["name"].endswith("-election")
    )
    assert election["metadata"]["namespace"] == "ops"
    named = [r for r in election["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["groupops-operator"],
            "verbs": ["get", "list", "watch", "update"],
        }
    ]

    single = [d for d in yaml.safe_load_all(render("ops", "replicas=1", "leaderElection.enabled=false")) if d]
    assert "PodDisruptionBudget" not in {d["kind"] for d in single}
    single_args = next(d for d in single if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert "--no-leader-election" in single_args["args"]


def test_offset_history_topic_is_passed_only_when_set() -> None:
    def args(*values: str) -> list[str]:
        documents = [d for d in yaml.safe_load_all(render("ops", *values)) if d]
        deployment = next(d for d in documents if d["kind"] == "Deployment")
        return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])

    assert not any(a.startswith("--history-topic") for a in args())
    assert "--history-topic=groupops-offsets" in args("operator.historyTopic=groupops-offsets")


def test_service_monitor_is_optional() -> None:
    without = render("ops")
    assert "ServiceMonitor" not in without
    with_monitor = render("ops", "metrics.serviceMonitor.enabled=true")
    monitor = next(d for d in yaml.safe_load_all(with_monitor) if d and d["kind"] == "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert "PodMonitor" not in with_monitor
    with_pods = render("ops", "metrics.consumerPodMonitor.enabled=true")
    pods = next(d for d in yaml.safe_load_all(with_pods) if d and d["kind"] == "PodMonitor")
    assert pods["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert pods["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/managed-by": "groupops"}


def test_heartbeats_get_a_udp_service_that_consumers_are_told_about() -> None:
    documents = [d for d in yaml.safe_load_all(render("ops")) if d]
    service = next(
        d for d in documents if d["kind"] == "Service" and d["metadata"]["name"].endswith("-heartbeat")
    )
    assert service["spec"]["ports"] == [
        {"name": "heartbeat", "port": 7946, "targetPort": "heartbeat", "protocol": "UDP"}
    ]
    container = next(d for d in documents if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert "--heartbeat-port=7946" in container["args"]
    assert "--heartbeat-address=groupops-heartbeat.ops.svc:7946" in container["args"]
    assert {"name": "heartbeat", "containerPort": 7946, "protocol": "UDP"} in container["ports"]
    assert any(env["name"] == "POD_IP" for env in container["env"])

    off = [d for d in yaml.safe_load_all(render("ops", "heartbeats.enabled=false")) if d]
    assert not any(d["kind"] == "Service" and d["metadata"]["name"].endswith("-heartbeat") for d in off)
    off_args = next(d for d in off if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert not any(arg.startswith("--heartbeat") for arg in off_args)
