"""The guard: what a ConsumerGroupPolicy may ask of the operator, judged against its allowlist.

Stage: right after `parse_policy`, before anything is rendered. Whoever may create a policy would
otherwise get (1) pods the operator creates from `spec.consumers.template` with its rights, and
(2) librdkafka properties that the operator itself loads for its own lag reads (plugins, commands,
files of the operator's pod). The guard refuses what the operator was not started to allow
(`GuardAllowlist`, from flags / chart values; the default allows nothing risky) and hardens what
the template leaves unsaid. Pure: mappings in, `Refusal`s and dicts out; no I/O.

Who calls what:
    check_pod_template(spec.consumers.template, allow)   at parse: the user's template only, so the
                                                         operator's own image and account are not judged
    check_kafka_properties(spec.kafka.properties, allow) at parse; and on the auth Secret's data with
                                                         where="Secret <name>": its keys reach the
                                                         operator's lag reads too
    harden_pod_template(render_pod(...))                 the rendered pod (same metadata/spec shape),
                                                         so the container the renderer adds is hardened
    raise GuardError(refusals)                           a SpecError: InvalidSpec condition, not retried

Every check returns ALL refusals, each with the path of the offending value in the resource and a
reason that names the flag that would permit it. Reasons never quote a property's value (it may
come from a Secret).

Pod rules follow the Pod Security Standards "restricted" profile (which contains "baseline"),
judged on the hardened template, so what `harden_pod_template` fills counts as set:
    --allow-privileged       privileged; allowPrivilegeEscalation not false; capabilities added beyond
                             NET_BIND_SERVICE or a drop list without ALL; procMount other than Default;
                             seccomp other than RuntimeDefault/Localhost; AppArmor unconfined (field or
                             annotation); custom SELinux user, role or type; sysctls outside the safe
                             set; Windows hostProcess
    --allow-run-as-root      runAsUser 0 or runAsNonRoot false, pod or container
    --allow-host-namespaces  hostNetwork, hostPID, hostIPC, hostPort, probes/hooks that name a host
    --allow-host-path        hostPath volumes
    --allow-volume-type T    volume types outside the restricted set (nfs, gitRepo, iscsi, ...)
    --allowed-image-registries  images (containers, initContainers, ephemeralContainers) elsewhere
    no flag                  serviceAccountName / serviceAccount / automountServiceAccountToken: the
                             operator runs consumers under the policy's own account and token
Not refused (PSS "optional"): root groups (runAsGroup 0): images built for arbitrary uids use gid 0.

Image registries: an image is first written in full, as the container runtime resolves it: a bare
name `groupops:0.1` is `docker.io/library/groupops:0.1`, `team/app` is `docker.io/team/app`, and
`index.docker.io`/`registry-1.docker.io` are `docker.io`; a first component with '.' or ':' or
`localhost` is a registry host. A prefix matches at a boundary only: a prefix without '/' is a
registry host (`registry.example.com` matches `registry.example.com/x`, not
`registry.example.com.evil.io/x` nor another port), a prefix with '/' matches the repository
itself or below it (`docker.io/library` matches `groupops:0.1`; `reg.io/team/app` matches
`reg.io/team/app:1` and `reg.io/team/app/sub`, not `reg.io/team/apple`). Hosts compare
case-insensitively.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from typing import Any

from groupops.controller.guard import (
    FLAG_HOST_NAMESPACES,
    FLAG_HOST_PATH,
    FLAG_IMAGE_REGISTRIES,
    FLAG_PRIVILEGED,
    FLAG_RUN_AS_ROOT,
    FLAG_VOLUME_TYPE,
    GuardAllowlist,
    Refusal,
    is_registry_host,
    refuse,
    words,
)

__all__ = ["IMAGE_UID", "check_pod_template", "harden_pod_template", "image_matches", "normalize_image"]

IMAGE_UID = 10001
"""uid and gid of the groupops image (Dockerfile `USER 10001:10001`): the default fsGroup, so the
mounted auth Secret (mode 0440) is readable by the consumer."""

CONTAINER_KINDS = ("containers", "initContainers", "ephemeralContainers")
ADDABLE_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
RESTRICTED_VOLUME_TYPES = words(
    "configMap csi downwardAPI emptyDir ephemeral persistentVolumeClaim projected secret"
)
SAFE_SYSCTLS = words(
    """
    kernel.shm_rmid_forced net.ipv4.ip_local_port_range net.ipv4.ip_local_reserved_ports
    net.ipv4.ip_unprivileged_port_start net.ipv4.ping_group_range net.ipv4.tcp_fin_timeout
    net.ipv4.tcp_keepalive_intvl net.ipv4.tcp_keepalive_probes net.ipv4.tcp_keepalive_time
    net.ipv4.tcp_syncookies
    """
)
"""PSS baseline's safe sysctls (namespaced, isolated from other pods) as of Kubernetes 1.29."""
SECCOMP_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_TYPES = frozenset({"RuntimeDefault", "Localhost"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_ANNOTATIONS = (
    "seccomp.security.alpha.kubernetes.io/pod",
    "container.seccomp.security.alpha.kubernetes.io/",
)
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_HOOKS = ("postStart", "preStop")
_DOCKER_HUB_ALIASES = frozenset({"index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"})


# -- pod templates -------------------------------------------------------------------------------


def harden_pod_template(template: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `template` (a PodTemplateSpec or a Pod) with secure defaults where it says nothing.

    Pod securityContext: runAsNonRoot true (not when the pod or a container states runAsUser 0:
    the kubelet would refuse to start it), seccompProfile RuntimeDefault, fsGroup 10001 (the
    image's gid, so the 0440 auth Secret is readable). Each container's securityContext:
    allowPrivilegeEscalation false (not for privileged containers or ones adding SYS_ADMIN: the
    API refuses that combination), capabilities.drop [ALL]. A key the template states is never
    changed, whatever its value (check_pod_template judges it); automountServiceAccountToken and
    the ServiceAccount are left alone (the operator sets them). Idempotent; the input is not changed.
    """
    result: dict[str, Any] = copy.deepcopy(dict(template))
    spec = result.get("spec")
    if spec is None:
        spec = result["spec"] = {}
    if not isinstance(spec, dict):
        return result
    containers = [c for _, _, c in _containers(spec) if isinstance(c, dict)]
    pod_context = _settable(spec, "securityContext")
    if pod_context is not None:
        states_root = _is_root(pod_context.get("runAsUser")) or any(
            _is_root(_mapping(c.get("securityContext")).get("runAsUser")) for c in containers
        )
        if not states_root:
            pod_context.setdefault("runAsNonRoot", True)
        pod_context.setdefault("seccompProfile", {"type": "RuntimeDefault"})
        pod_context.setdefault("fsGroup", IMAGE_UID)
    for container in containers:
        context = _settable(container, "securityContext")
        if context is None:
            continue
        if not _escalates(context):
            context.setdefault("allowPrivilegeEscalation", False)
        capabilities = _settable(context, "capabilities")
        if capabilities is not None:
            capabilities.setdefault("drop", ["ALL"])
    return result


def check_pod_template(
    template: Mapping[str, Any], allow: GuardAllowlist, *, where: str = "spec.consumers.template"
) -> list[Refusal]:
    """Everything in `template` the allowlist does not permit, judged as `harden_pod_template`
    would leave it (so check(t) == check(harden(t))). Empty: the pod may be created."""
    hardened = harden_pod_template(template)
    spec = _mapping(hardened.get("spec"))
    at = f"{where}.spec"
    refusals = [
        *_pod_identity(spec, at),
        *_pod_host(spec, at, allow),
        *_pod_context(_mapping(spec.get("securityContext")), f"{at}.securityContext", allow),
        *_volumes(spec, at, allow),
        *_annotations(_mapping(_mapping(hardened.get("metadata")).get("annotations")), where, allow),
    ]
    for kind, index, container in _containers(spec):
        path = f"{at}.{kind}[{index}]"
        refusals += _container(_mapping(container), path, allow)
    return refusals


def _pod_identity(spec: Mapping[str, Any], at: str) -> Iterator[Refusal]:
    for key in ("serviceAccountName", "serviceAccount"):
        if key in spec:
            yield Refusal(
                f"{at}.{key}",
                "a template may not choose the ServiceAccount: the operator runs consumers under the "
                "policy's own account (<policy>-consumer) and no flag permits another",
            )
    if "automountServiceAccountToken" in spec:
        yield Refusal(
            f"{at}.automountServiceAccountToken",
            "the operator decides whether consumers get their account's token (they renew their "
            "Lease with it); remove it from the template, no flag permits it",
        )


def _pod_host(spec: Mapping[str, Any], at: str, allow: GuardAllowlist) -> Iterator[Refusal]:
    if allow.host_namespaces:
        return
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key) not in (None, False):
            yield refuse(f"{at}.{key}", f"sharing the node's namespaces ({key})", FLAG_HOST_NAMESPACES)


def _pod_context(context: Mapping[str, Any], at: str, allow: GuardAllowlist) -> Iterator[Refusal]:
    yield from _common_context(context, at, allow)
    if allow.privileged:
        return
    for index, sysctl in enumerate(_list(context.get("sysctls"))):
        name = _mapping(sysctl).get("name")
        if name not in SAFE_SYSCTLS:
            yield refuse(
                f"{at}.sysctls[{index}].name",
                f"sysctl {name!r} (outside the safe set: {', '.join(sorted(SAFE_SYSCTLS))})",
                FLAG_PRIVILEGED,
            )


def _container(container: Mapping[str, Any], at: str, allow: GuardAllowlist) -> Iterator[Refusal]:
    context = _mapping(container.get("securityContext"))
    ctx = f"{at}.securityContext"
    yield from _common_context(context, ctx, allow)
    if not allow.privileged:
        if context.get("privileged") not in (None, False):
            yield refuse(f"{ctx}.privileged", "privileged containers", FLAG_PRIVILEGED)
        escalation = context.get("allowPrivilegeEscalation")
        if escalation is not False and not (escalation is None and _escalates(context)):
            yield refuse(
                f"{ctx}.allowPrivilegeEscalation",
                "containers that may gain privileges (allowPrivilegeEscalation not false)",
                FLAG_PRIVILEGED,
            )
        capabilities = _mapping(context.get("capabilities"))
        for index, capability in enumerate(_list(capabilities.get("add"))):
            if _capability(capability) not in ADDABLE_CAPABILITIES:
                yield refuse(
                    f"{ctx}.capabilities.add[{index}]",
                    f"adding capability {capability!r} (only NET_BIND_SERVICE may be added)",
                    FLAG_PRIVILEGED,
                )
        if "ALL" not in {_capability(c) for c in _list(capabilities.get("drop"))}:
            yield refuse(
                f"{ctx}.capabilities.drop",
                "keeping capabilities (the drop list must hold ALL)",
                FLAG_PRIVILEGED,
            )
        if context.get("procMount") not in (None, "Default"):
            yield refuse(
                f"{ctx}.procMount", "an unmasked /proc (procMount other than Default)", FLAG_PRIVILEGED
            )
    if not allow.host_namespaces:
        for index, port in enumerate(_list(container.get("ports"))):
            if _mapping(port).get("hostPort") not in (None, 0):
                yield refuse(
                    f"{at}.ports[{index}].hostPort", "ports on the node (hostPort)", FLAG_HOST_NAMESPACES
                )
        for handler, path in _handlers(container, at):
            for action in ("httpGet", "tcpSocket"):
                if _mapping(handler.get(action)).get("host") not in (None, ""):
                    yield refuse(
                        f"{path}.{action}.host",
                        "probes and hooks that the kubelet sends to another host",
                        FLAG_HOST_NAMESPACES,
                    )
    image = container.get("image")
    if allow.image_registries and image is not None and not image_matches(image, allow.image_registries):
        yield Refusal(
            f"{at}.image",
            f"image {image!r} ({normalize_image(str(image))}) is outside the allowed registries "
            f"({', '.join(allow.image_registries)}); the operator allows others only when started "
            f"with {FLAG_IMAGE_REGISTRIES} naming them",
        )


def _common_context(context: Mapping[str, Any], at: str, allow: GuardAllowlist) -> Iterator[Refusal]:
    """The fields a pod and a container securityContext share."""
    if not allow.run_as_root:
        if _is_root(context.get("runAsUser")):
            yield refuse(f"{at}.runAsUser", "running as root (runAsUser 0)", FLAG_RUN_AS_ROOT)
        if context.get("runAsNonRoot") not in (None, True):
            yield refuse(f"{at}.runAsNonRoot", "running as root (runAsNonRoot not true)", FLAG_RUN_AS_ROOT)
    if allow.privileged:
        return
    seccomp = context.get("seccompProfile")
    if seccomp is not None and _mapping(seccomp).get("type") not in SECCOMP_TYPES:
        yield refuse(
            f"{at}.seccompProfile.type", "seccomp other than RuntimeDefault or Localhost", FLAG_PRIVILEGED
        )
    apparmor = context.get("appArmorProfile")
    if apparmor is not None and _mapping(apparmor).get("type") not in APPARMOR_TYPES:
        yield refuse(
            f"{at}.appArmorProfile.type", "AppArmor other than RuntimeDefault or Localhost", FLAG_PRIVILEGED
        )
    selinux = _mapping(context.get("seLinuxOptions"))
    if selinux.get("type") not in (None, *SELINUX_TYPES):
        yield refuse(f"{at}.seLinuxOptions.type", "a custom SELinux type", FLAG_PRIVILEGED)
    for key in ("user", "role"):
        if selinux.get(key) not in (None, ""):
            yield refuse(f"{at}.seLinuxOptions.{key}", f"a custom SELinux {key}", FLAG_PRIVILEGED)
    if _mapping(context.get("windowsOptions")).get("hostProcess") not in (None, False):
        yield refuse(f"{at}.windowsOptions.hostProcess", "Windows hostProcess containers", FLAG_PRIVILEGED)


def _volumes(spec: Mapping[str, Any], at: str, allow: GuardAllowlist) -> Iterator[Refusal]:
    for index, volume in enumerate(_list(spec.get("volumes"))):
        for kind in _mapping(volume):
            path = f"{at}.volumes[{index}].{kind}"
            if kind == "name" or kind in RESTRICTED_VOLUME_TYPES:
                continue
            if kind == "hostPath":
                if not allow.host_path:
                    yield refuse(path, "hostPath volumes (files of the node)", FLAG_HOST_PATH)
            elif kind not in allow.volume_types:
                yield refuse(
                    path,
                    f"{kind} volumes (outside the restricted set: "
                    f"{', '.join(sorted(RESTRICTED_VOLUME_TYPES))})",
                    f"{FLAG_VOLUME_TYPE} {kind}",
                )


def _annotations(annotations: Mapping[str, Any], where: str, allow: GuardAllowlist) -> Iterator[Refusal]:
    """The older annotation forms of AppArmor and seccomp, still read by some kubelets."""
    if allow.privileged:
        return
    for key, value in annotations.items():
        path = f"{where}.metadata.annotations.{key}"
        if str(key).startswith(APPARMOR_ANNOTATION) and not (
            value == "runtime/default" or str(value).startswith("localhost/")
        ):
            yield refuse(path, "AppArmor other than runtime/default or localhost/*", FLAG_PRIVILEGED)
        if (
            str(key).startswith(SECCOMP_ANNOTATIONS)
            and value not in ("runtime/default", "docker/default")
            and not (str(value).startswith("localhost/"))
        ):
            yield refuse(path, "seccomp other than runtime/default or localhost/*", FLAG_PRIVILEGED)


def normalize_image(image: str) -> str:
    """`image` written in full, as the runtime resolves it: `groupops:0.1` ->
    `docker.io/library/groupops:0.1`, `Reg.IO/x` -> `reg.io/x`."""
    first, slash, rest = image.partition("/")
    if slash and is_registry_host(first):
        host = _registry_host(first)
    else:
        host, rest = "docker.io", image
    repository = re.split(r"[:@]", rest, maxsplit=1)[0]
    if host == "docker.io" and "/" not in repository:
        rest = f"library/{rest}"
    return f"{host}/{rest}"


def image_matches(image: Any, prefixes: tuple[str, ...]) -> bool:
    """Whether `image` (written in full) starts with one of `prefixes` at a boundary."""
    if not isinstance(image, str) or not image:
        return False
    full = normalize_image(image)
    for prefix in prefixes:
        host, slash, path = prefix.rstrip("/").partition("/")
        wanted = f"{_registry_host(host)}{slash}{path}"
        if not full.startswith(wanted):
            continue
        boundary = full[len(wanted) : len(wanted) + 1]
        if boundary == "/" or (slash and boundary in ("", ":", "@")):
            return True
    return False


# -- helpers -------------------------------------------------------------------------------------


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, int, Any]]:
    for kind in CONTAINER_KINDS:
        for index, container in enumerate(_list(spec.get(kind))):
            yield kind, index, container


def _handlers(container: Mapping[str, Any], at: str) -> Iterator[tuple[Mapping[str, Any], str]]:
    for probe in _PROBES:
        if probe in container:
            yield _mapping(container[probe]), f"{at}.{probe}"
    lifecycle = _mapping(container.get("lifecycle"))
    for hook in _HOOKS:
        if hook in lifecycle:
            yield _mapping(lifecycle[hook]), f"{at}.lifecycle.{hook}"


def _settable(parent: dict[str, Any], key: str) -> dict[str, Any] | None:
    """parent[key] as a dict to fill in, created when absent (or null); None when it holds
    something else (not ours to fix: the API server refuses it)."""
    value = parent.get(key)
    if value is None:
        value = parent[key] = {}
    return value if isinstance(value, dict) else None


def _escalates(context: Mapping[str, Any]) -> bool:
    """Privileged or adding SYS_ADMIN: escalation follows (the API refuses allowPrivilegeEscalation
    false beside either), so hardening leaves it unset and only the cause is refused."""
    added = {_capability(c) for c in _list(_mapping(context.get("capabilities")).get("add"))}
    return context.get("privileged") is True or "SYS_ADMIN" in added


def _registry_host(host: str) -> str:
    host = host.lower()
    return "docker.io" if host in _DOCKER_HUB_ALIASES else host


def _capability(value: Any) -> str:
    text = str(value).upper()
    return text.removeprefix("CAP_")


def _is_root(value: Any) -> bool:
    return value == 0 and not isinstance(value, bool)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
