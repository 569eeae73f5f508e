"""The guard's librdkafka rules: the properties a policy gives (spec.kafka.properties and its auth
Secret's data) are loaded by the operator itself for its own lag reads, and by every consumer.

Kafka rules (each waived for a name given with --allow-kafka-property NAME, which also admits
names librdkafka does not know, e.g. a plugin's):
    names: lowercase letters, digits, '.' and '_' only; known to librdkafka 2.16 (the one
        confluent-kafka 2.16 bundles); not a C-API-only entry (callbacks, pointers)
    code: plugin.library.paths, ssl.engine.location, ssl.engine.id, ssl.providers load shared
        objects; sasl.kerberos.kinit.cmd runs a shell command, sasl.kerberos.principal is pasted
        into it unquoted (only [A-Za-z0-9._/@-] passes)
    files: *.location, *.file, sasl.kerberos.keytab, offset.store.path make the OPERATOR read (or
        write) files of its own pod; PEM contents go in the auth Secret (ssl.ca.pem, ...);
        ssl.ca.location and https.ca.location may be `probe` (the system's CAs)
    verification: enable.ssl.certificate.verification other than true; ssl.endpoint.
        identification.algorithm other than https; ssl.cipher.suites naming NULL, anonymous or
        EXPORT ciphers or lowering @SECLEVEL to 0
    identity: sasl.oauthbearer.token.endpoint.url other than https:// (client secret in clear,
        file:// reads operator files); sasl.oauthbearer.metadata.authentication.type other than
        none (azure_imds/aws_iam would use the operator's node's cloud identity)
    operator: debug (log volume of the one shared operator), internal.termination.signal (a signal
        handler in the operator's process)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from groupops.controller.guard import (
    FLAG_BOOTSTRAP_SERVERS,
    FLAG_KAFKA_PROPERTY,
    FLAG_LAG_SOURCE_URLS,
    GuardAllowlist,
    Refusal,
    words,
)

__all__ = [
    "LIBRDKAFKA_PROPERTIES",
    "check_bootstrap_servers",
    "check_kafka_properties",
    "check_lag_source_url",
    "url_has_prefix",
]

LIBRDKAFKA_PROPERTIES = words(
    """
    acks allow.auto.create.topics api.version.fallback.ms api.version.request
    api.version.request.timeout.ms auto.commit.enable auto.commit.interval.ms auto.offset.reset
    batch.num.messages batch.size bootstrap.servers broker.address.family broker.address.ttl
    broker.version.fallback builtin.features check.crcs client.dns.lookup client.id client.rack
    compression.codec compression.level compression.type connections.max.idle.ms
    consume.callback.max.messages coordinator.query.interval.ms debug delivery.report.only.error
    delivery.timeout.ms enable.auto.commit enable.auto.offset.store enable.gapless.guarantee
    enable.idempotence enable.metrics.push enable.partition.eof enable.random.seed
    enable.sasl.oauthbearer.unsecure.jwt enable.ssl.certificate.verification enabled_events
    fetch.error.backoff.ms fetch.max.bytes fetch.message.max.bytes fetch.min.bytes
    fetch.queue.backoff.ms fetch.wait.max.ms group.id group.instance.id group.protocol
    group.protocol.type group.remote.assignor heartbeat.interval.ms https.ca.location https.ca.pem
    internal.termination.signal isolation.level linger.ms log.connection.close log.queue
    log.thread.name log_level max.in.flight max.in.flight.requests.per.connection
    max.partition.fetch.bytes max.poll.interval.ms max.poll.records message.copy.max.bytes
    message.max.bytes message.send.max.retries message.timeout.ms metadata.broker.list
    metadata.max.age.ms metadata.recovery.rebootstrap.trigger.ms metadata.recovery.strategy
    offset.store.method offset.store.path offset.store.sync.interval.ms partition.assignment.strategy
    partitioner plugin.library.paths produce.offset.report queue.buffering.backpressure.threshold
    queue.buffering.max.kbytes queue.buffering.max.messages queue.buffering.max.ms
    queued.max.messages.kbytes queued.min.messages queuing.strategy receive.message.max.bytes
    reconnect.backoff.jitter.ms reconnect.backoff.max.ms reconnect.backoff.ms request.required.acks
    request.timeout.ms retries retry.backoff.max.ms retry.backoff.ms sasl.kerberos.keytab
    sasl.kerberos.kinit.cmd sasl.kerberos.min.time.before.relogin sasl.kerberos.principal
    sasl.kerberos.service.name sasl.mechanism sasl.mechanisms sasl.oauthbearer.assertion.algorithm
    sasl.oauthbearer.assertion.claim.aud sasl.oauthbearer.assertion.claim.exp.seconds
    sasl.oauthbearer.assertion.claim.iss sasl.oauthbearer.assertion.claim.jti.include
    sasl.oauthbearer.assertion.claim.nbf.seconds sasl.oauthbearer.assertion.claim.sub
    sasl.oauthbearer.assertion.file sasl.oauthbearer.assertion.jwt.template.file
    sasl.oauthbearer.assertion.private.key.file sasl.oauthbearer.assertion.private.key.passphrase
    sasl.oauthbearer.assertion.private.key.pem sasl.oauthbearer.client.credentials.client.id
    sasl.oauthbearer.client.credentials.client.secret sasl.oauthbearer.client.id
    sasl.oauthbearer.client.secret sasl.oauthbearer.config sasl.oauthbearer.extensions
    sasl.oauthbearer.grant.type sasl.oauthbearer.metadata.authentication.type
    sasl.oauthbearer.method sasl.oauthbearer.scope sasl.oauthbearer.sub.claim.name
    sasl.oauthbearer.token.endpoint.url sasl.password sasl.username security.protocol
    session.timeout.ms share.acknowledgement.mode socket.blocking.max.ms
    socket.connection.setup.timeout.ms socket.keepalive.enable socket.max.fails socket.nagle.disable
    socket.receive.buffer.bytes socket.send.buffer.bytes socket.timeout.ms ssl.ca.certificate.stores
    ssl.ca.location ssl.ca.pem ssl.certificate.location ssl.certificate.pem ssl.cipher.suites
    ssl.crl.location ssl.curves.list ssl.endpoint.identification.algorithm ssl.engine.id
    ssl.engine.location ssl.key.location ssl.key.password ssl.key.pem ssl.keystore.location
    ssl.keystore.password ssl.providers ssl.sigalgs.list statistics.interval.ms
    sticky.partitioning.linger.ms topic.blacklist topic.metadata.propagation.max.ms
    topic.metadata.refresh.fast.cnt topic.metadata.refresh.fast.interval.ms
    topic.metadata.refresh.interval.ms topic.metadata.refresh.sparse transaction.timeout.ms
    transactional.id
    """
)
"""Every property librdkafka 2.16.0 takes as a string (rd_kafka_conf_properties_show of the
library confluent-kafka 2.16.1 bundles; global and topic level)."""
LIBRDKAFKA_API_ONLY = words(
    """
    background_event_cb closesocket_cb connect_cb consume_cb default_topic_conf dr_cb dr_msg_cb
    error_cb interceptors log_cb msg_order_cmp oauthbearer_token_refresh_cb offset_commit_cb opaque
    open_cb partitioner_cb rebalance_cb resolve_cb socket_cb ssl.certificate.verify_cb ssl_ca
    ssl_certificate ssl_engine_callback_data ssl_key stats_cb throttle_cb
    """
)
"""librdkafka entries set through its C API only (callbacks, pointers): never from a policy."""

_PROPERTY_NAME = re.compile(r"^[a-z0-9._]+$")
_KERBEROS_PRINCIPAL = re.compile(r"^[A-Za-z0-9._/@-]+$")
_CIPHER_SEPARATORS = re.compile(r"[:,\s]+")
_WEAK_CIPHER_PARTS = ("NULL", "EXP", "ADH", "AECDH", "COMPLEMENTOF")
_TRUE = frozenset({"true", "t", "1"})


def check_kafka_properties(
    properties: Mapping[str, Any], allow: GuardAllowlist, *, where: str = "spec.kafka.properties"
) -> list[Refusal]:
    """Every librdkafka property in `properties` the allowlist does not permit. `where` names the
    source (`Secret orders-kafka` for the auth Secret's data). Values are never quoted."""
    refusals: list[Refusal] = []
    for name, value in properties.items():
        if name in allow.kafka_properties:
            continue
        reason = _property_reason(str(name), "" if value is None else str(value))
        if reason is not None:
            refusals.append(
                Refusal(
                    f"{where}.{name}",
                    f"{reason}; the operator allows it only when started with {FLAG_KAFKA_PROPERTY} {name}",
                )
            )
    return refusals


def check_bootstrap_servers(servers: str, allow: GuardAllowlist) -> list[Refusal]:
    """The servers of `spec.kafka.bootstrapServers` that no allowed pattern matches (none when
    the allowlist is empty). Without this, a policy could send its auth Secret's credentials to a
    broker of its author's (a valid certificate for their own domain passes verification)."""
    if not allow.bootstrap_servers:
        return []
    refused = [
        s for s in servers.split(",") if not any(_server_matches(s, p) for p in allow.bootstrap_servers)
    ]
    if not refused:
        return []
    listed = ", ".join(allow.bootstrap_servers)
    return [
        Refusal(
            "spec.kafka.bootstrapServers",
            f"broker {', '.join(refused)} is not one the operator may connect to (allowed: {listed}); "
            f"the operator allows it only when started with {FLAG_BOOTSTRAP_SERVERS} naming it",
        )
    ]


def check_lag_source_url(kind: str, settings: Mapping[str, Any], allow: GuardAllowlist) -> list[Refusal]:
    """The URL of a `prometheus` or `burrow` lag source when no allowed prefix starts it (none when
    the allowlist is empty). Without this, a policy could send the bearer token or password of a
    Secret the operator may read to a server of its author's."""
    url = settings.get("url")
    if not allow.lag_source_urls or kind not in ("prometheus", "burrow") or not isinstance(url, str):
        return []
    if any(url_has_prefix(url, prefix) for prefix in allow.lag_source_urls):
        return []
    return [
        Refusal(
            f"spec.lagSource.{kind}.url",
            f"{url} is not a server the operator may send a lag source's credentials to (allowed: "
            f"{', '.join(allow.lag_source_urls)}); the operator allows it only when started with "
            f"{FLAG_LAG_SOURCE_URLS} naming it",
        )
    ]


def url_has_prefix(url: str, prefix: str) -> bool:
    """`url` is `prefix` or continues it at a path boundary; scheme and host compared without
    case. `https://prom:9090` starts `https://prom:9090/api` but not `https://prom:90901` nor
    `https://prom:9090.evil.example`."""

    def parts(text: str) -> tuple[str, str, str]:
        scheme, _, rest = text.partition("://")
        authority, slash, path = rest.partition("/")
        return scheme.lower(), authority.lower(), slash + path

    u_scheme, u_authority, u_path = parts(url.strip())
    p_scheme, p_authority, p_path = parts(prefix.strip())
    if (u_scheme, u_authority) != (p_scheme, p_authority):
        return False
    base = p_path.rstrip("/")
    return not base or u_path == base or u_path.startswith(base + "/")


def _server_matches(server: str, pattern: str) -> bool:
    host, _, port = server.strip().lower().rpartition(":")
    allowed_host, _, allowed_port = pattern.lower().rpartition(":")
    if port != allowed_port:
        return False
    if allowed_host.startswith("*."):
        return host.endswith(allowed_host[1:]) and len(host) > len(allowed_host) - 1
    return host == allowed_host


def _property_reason(name: str, value: str) -> str | None:
    if not _PROPERTY_NAME.match(name):
        return "not a librdkafka property name (lowercase letters, digits, '.' and '_' only)"
    if name in LIBRDKAFKA_API_ONLY:
        return f"{name} is set through librdkafka's C API (a callback or pointer), not as a property"
    if name not in LIBRDKAFKA_PROPERTIES:
        return f"librdkafka 2.16 has no property {name} (misspelt, newer, or a plugin's)"
    rule = _PROPERTY_RULES.get(name)
    return rule(value) if rule is not None else None


def _always(reason: str) -> Callable[[str], str | None]:
    return lambda _value: reason


def _file(name: str, instead: str | None, *, probe: bool = False) -> Callable[[str], str | None]:
    """A path property: the operator would read (or write) a file of its own pod."""
    fix = f"put the PEM contents in the auth Secret as {instead}" if instead else "it has no inline form"
    reason = (
        f"{name} names a file, and the operator uses the policy's properties for its own lag reads: "
        f"it would open a file of the operator's pod; {fix}"
    )
    return lambda value: None if probe and value.strip() == "probe" else reason


def _kerberos_principal(value: str) -> str | None:
    if _KERBEROS_PRINCIPAL.match(value):
        return None
    return (
        "sasl.kerberos.principal is pasted unquoted into the kinit shell command: only letters, "
        "digits and ._/@- may appear"
    )


def _verification(value: str) -> str | None:
    if value.strip().lower() in _TRUE:
        return None
    return (
        "turning off TLS certificate verification (enable.ssl.certificate.verification not true) "
        "lets anyone on the path pose as the brokers"
    )


def _hostname_verification(value: str) -> str | None:
    if value.strip().lower() == "https":
        return None
    return (
        "turning off broker hostname verification (ssl.endpoint.identification.algorithm other "
        "than https) accepts any valid certificate for any broker name"
    )


def _ciphers(value: str) -> str | None:
    """OpenSSL cipher-list words: `!X` and `-X` remove X (safe), `A+B` means both."""
    for word in _CIPHER_SEPARATORS.split(value.upper()):
        if word.startswith(("!", "-")):
            continue
        parts = word.lstrip("+").split("+")
        if word == "@SECLEVEL=0" or any(
            "NULL" in part or part.startswith(_WEAK_CIPHER_PARTS) for part in parts
        ):
            break
    else:
        return None
    return (
        "ssl.cipher.suites names NULL, anonymous or EXPORT ciphers or lowers @SECLEVEL to 0 "
        "(no encryption or no authentication of the brokers)"
    )


def _token_endpoint(value: str) -> str | None:
    if value.strip().lower().startswith("https://"):
        return None
    return (
        "sasl.oauthbearer.token.endpoint.url must be https:// (the client secret would travel in "
        "clear, and file:// reads the operator's files)"
    )


def _metadata_authentication(value: str) -> str | None:
    if value.strip().lower() in ("", "none"):
        return None
    return (
        "metadata-based OAUTHBEARER authentication (azure_imds, aws_iam) would sign in with the "
        "cloud identity of the operator's node, not the policy's"
    )


_PROPERTY_RULES: Mapping[str, Callable[[str], str | None]] = {
    "plugin.library.paths": _always("plugin.library.paths loads shared libraries into the operator"),
    "ssl.engine.location": _always("ssl.engine.location loads an OpenSSL engine into the operator"),
    "ssl.engine.id": _always("ssl.engine.id loads an OpenSSL engine into the operator"),
    "ssl.providers": _always("ssl.providers loads OpenSSL providers (shared objects) into the operator"),
    "sasl.kerberos.kinit.cmd": _always("sasl.kerberos.kinit.cmd runs a shell command in the operator"),
    "sasl.kerberos.principal": _kerberos_principal,
    "sasl.kerberos.keytab": _file("sasl.kerberos.keytab", None),
    "ssl.key.location": _file("ssl.key.location", "ssl.key.pem"),
    "ssl.certificate.location": _file("ssl.certificate.location", "ssl.certificate.pem"),
    "ssl.ca.location": _file(
        "ssl.ca.location", "ssl.ca.pem (or give the value probe: the system's CAs)", probe=True
    ),
    "https.ca.location": _file(
        "https.ca.location", "https.ca.pem (or give the value probe: the system's CAs)", probe=True
    ),
    "ssl.keystore.location": _file("ssl.keystore.location", "ssl.key.pem and ssl.certificate.pem"),
    "ssl.crl.location": _file("ssl.crl.location", None),
    "sasl.oauthbearer.assertion.private.key.file": _file(
        "sasl.oauthbearer.assertion.private.key.file", "sasl.oauthbearer.assertion.private.key.pem"
    ),
    "sasl.oauthbearer.assertion.file": _file("sasl.oauthbearer.assertion.file", None),
    "sasl.oauthbearer.assertion.jwt.template.file": _file(
        "sasl.oauthbearer.assertion.jwt.template.file", None
    ),
    "offset.store.path": _file("offset.store.path", None),
    "enable.ssl.certificate.verification": _verification,
    "ssl.endpoint.identification.algorithm": _hostname_verification,
    "ssl.cipher.suites": _ciphers,
    "sasl.oauthbearer.token.endpoint.url": _token_endpoint,
    "sasl.oauthbearer.metadata.authentication.type": _metadata_authentication,
    "debug": _always("debug multiplies the log volume of the operator, which every policy shares"),
    "internal.termination.signal": _always(
        "internal.termination.signal installs a signal handler in the operator's process"
    ),
}
"""Known properties judged by value; any other known property passes."""
