"""The guard's vocabulary: what the operator was started to allow (`GuardAllowlist`, from its
flags), what it refuses (`Refusal`), and the error a refused policy reports (`GuardError`, an
InvalidSpec-like failure that waits for a person: Stalled=True). The rules live beside it: pod
templates in `podguard`, librdkafka properties in `kafkaguard` (docs/design.md §13.3). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from groupops.controller.spec import SpecError

__all__ = [
    "FLAG_BOOTSTRAP_SERVERS",
    "FLAG_HOST_NAMESPACES",
    "FLAG_HOST_PATH",
    "FLAG_IMAGE_REGISTRIES",
    "FLAG_KAFKA_PROPERTY",
    "FLAG_LAG_SOURCE_URLS",
    "FLAG_PRIVILEGED",
    "FLAG_RUN_AS_ROOT",
    "FLAG_VOLUME_TYPE",
    "GuardAllowlist",
    "GuardError",
    "Refusal",
    "is_registry_host",
    "refuse",
    "words",
]

FLAG_PRIVILEGED = "--allow-privileged"
FLAG_RUN_AS_ROOT = "--allow-run-as-root"
FLAG_HOST_NAMESPACES = "--allow-host-namespaces"
FLAG_HOST_PATH = "--allow-host-path"
FLAG_VOLUME_TYPE = "--allow-volume-type"
FLAG_IMAGE_REGISTRIES = "--allowed-image-registries"
FLAG_KAFKA_PROPERTY = "--allow-kafka-property"
FLAG_BOOTSTRAP_SERVERS = "--allowed-bootstrap-servers"
FLAG_LAG_SOURCE_URLS = "--allowed-lag-source-urls"


def words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def refuse(field: str, what: str, flag: str) -> Refusal:
    return Refusal(field, f"{what} refused; the operator allows it only when started with {flag}")


def is_registry_host(component: str) -> bool:
    """Whether an image's first component is a registry host (as the runtime decides)."""
    return "." in component or ":" in component or component == "localhost"


@dataclass(frozen=True, slots=True)
class Refusal:
    """One thing the guard refuses: `field` is the path of the value in the resource
    (`spec.consumers.template.spec.containers[0].securityContext.privileged`)."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.reason} ({self.field})"


class GuardError(SpecError):
    """A policy the guard refuses. `field`/`message` are the first refusal's (as for any
    SpecError); `str()` and `refusals` give all of them."""

    def __init__(self, refusals: list[Refusal] | tuple[Refusal, ...]) -> None:
        if not refusals:
            raise ValueError("GuardError needs at least one refusal")
        super().__init__(refusals[0].field, refusals[0].reason)
        self.refusals = tuple(refusals)
        self.args = ("; ".join(str(refusal) for refusal in self.refusals),)


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardAllowlist:
    """What the operator was started with (flags / chart values). The default allows nothing risky.

    privileged: privileged containers, privilege escalation, capabilities beyond NET_BIND_SERVICE
    or not dropping ALL, unconfined seccomp/AppArmor, custom SELinux, unsafe sysctls, /proc unmasked,
    Windows hostProcess (--allow-privileged). run_as_root: runAsUser 0, runAsNonRoot false
    (--allow-run-as-root). host_namespaces: hostNetwork/PID/IPC, hostPort, probes naming a host
    (--allow-host-namespaces). host_path: hostPath volumes (--allow-host-path). volume_types:
    volume types beyond the restricted set, by field name, e.g. "nfs" (--allow-volume-type).
    image_registries: empty, any registry; else every image the template names must match one of
    these prefixes (see the module docstring) (--allowed-image-registries). kafka_properties:
    librdkafka property names exempt from every Kafka rule (--allow-kafka-property NAME).
    bootstrap_servers: empty, any broker; else every server a policy names must match one of
    these `host:port` patterns, where a host `*.example.com` matches any name ending in
    `.example.com` (--allowed-bootstrap-servers): the auth Secret's credentials go only to the
    brokers the platform team named. lag_source_urls: empty, any; else the URL of a `prometheus`
    or `burrow` lag source must start with one of these `scheme://host[:port][/path]` prefixes
    (--allowed-lag-source-urls): the Secret a source names (a bearer token, a password) goes only
    to the servers the platform team named.
    """

    privileged: bool = False
    run_as_root: bool = False
    host_namespaces: bool = False
    host_path: bool = False
    volume_types: tuple[str, ...] = ()
    image_registries: tuple[str, ...] = ()
    kafka_properties: tuple[str, ...] = ()
    bootstrap_servers: tuple[str, ...] = ()
    lag_source_urls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for prefix in self.image_registries:
            host = prefix.partition("/")[0]
            if "://" in prefix or prefix != prefix.strip() or not is_registry_host(host):
                raise ValueError(
                    f"image registry prefix {prefix!r}: give a registry host first, host[:port][/path] "
                    "(docker.io/library for bare names like groupops:0.1), no scheme"
                )
        for name in self.kafka_properties:
            if not name or name != name.strip():
                raise ValueError(f"Kafka property name {name!r} is empty or padded")
        for prefix in self.lag_source_urls:
            scheme, _, rest = prefix.partition("://")
            if (
                scheme.lower() not in ("http", "https")
                or not rest
                or rest.startswith("/")
                or prefix != prefix.strip()
            ):
                raise ValueError(
                    f"lag source URL prefix {prefix!r}: give scheme://host[:port][/path], e.g. "
                    "https://prometheus.monitoring.svc:9090"
                )
        for pattern in self.bootstrap_servers:
            host, _, port = pattern.rpartition(":")
            if not host or not port.isdigit() or "*" in host.removeprefix("*.") or "://" in pattern:
                raise ValueError(
                    f"bootstrap server pattern {pattern!r}: give host:port, the host optionally "
                    "starting with *. for a whole domain (*.kafka.example.com:9093), no scheme"
                )
