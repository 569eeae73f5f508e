"""Conflicts between policies: two policies that claim one consumer group of one Kafka cluster
would publish two plans and run two sets of replicas committing for one group. The later one
stands down (docs/design.md §6.4).

Stage: controller. The rule (`cluster_spec.normalise_servers`, `claim_of`, `first_rival`) is pure: the
policies' objects in, an answer out, no clock and no API call, so every operator replica and
every reconcile gives the same one. `PolicyClaims` keeps every watched policy's claim, indexed by
group id, from a watch of the policies that `main.run_operator` starts with the watch caches
(standby time included: a new leader knows every claim before its first reconcile); it tells
`handlers` whose standing a change of a policy changed, so that they run at once.
`stand_down_if_later` is the reconcile's step, right after the spec step (parse, guard).

The rule, in order:

1. A policy claims (`spec.groupId`, `spec.kafka.bootstrapServers`) as written, valid or not.
   A dry run claims nothing and is never refused: it publishes no plan and runs no consumer.
2. Same cluster: the two policies name the same ConsumerGroupCluster, or their bootstrap server
   sets intersect after each `host[:port]` is normalised (protocol prefix dropped, host
   lowercased without a trailing dot, port 9092 when none is written). A clusterRef reaches
   the servers its cluster lists (`ClusterBook.servers_of`, as last seen), so a policy written
   inline and one naming the cluster meet. No name is resolved: `kafka:9092` and
   `10.0.0.7:9092` are different clusters to this rule even when they are one.
3. Of two claims on one group id and one cluster the first is the one with the earlier
   `metadata.creationTimestamp`, then the smaller namespace, then the smaller name (the
   timestamp has one-second resolution). Namespaces do not separate claims: a Kafka group id is
   one per cluster.
4. A policy whose claim comes after some rival's stands down, whether that rival runs or stands
   down itself (sharing a server with the rival, it is on the cluster of the rival's own first
   rival too). It names its first rival, writes only its status (`Ready=False`,
   `Stalled=True`, reason `Conflict`) and deletes the consumer pods it may still run; its plan,
   Leases and accounts stay as they are.

Worked example: `a/orders` (created 10:00:00, `Kafka-1:9092,kafka-2:9092`, group `orders`) and
`b/orders-v2` (created 10:05:00, `kafka-2`, group `orders`): both name `kafka-2:9092`, so one
cluster; `a/orders` is first. `b/orders-v2` stands down naming `a/orders`; deleting `a/orders`,
or moving it to another group, wakes `b/orders-v2`, which then plans and starts its pods.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from groupops.controller.apply import apply
from groupops.controller.cache import STARTUP_SYNC_S, WatchCache
from groupops.controller.cluster_spec import normalise_servers
from groupops.controller.names import API_GROUP, API_VERSION, KIND, owned_selector
from groupops.controller.report import fail
from groupops.kubeapi import KubeClient, KubeError

if TYPE_CHECKING:
    from groupops.controller.context import RunContext
    from groupops.controller.metrics import Metrics
    from groupops.controller.settings import Settings

__all__ = [
    "STOPPED_FIGURES",
    "Claim",
    "PolicyClaims",
    "PolicyKey",
    "WakeListener",
    "claim_of",
    "conflict_message",
    "first_rival",
    "stand_down_if_later",
    "start_policy_claims",
]

log = logging.getLogger(__name__)


STOPPED_FIGURES = (
    "replicas",
    "readyReplicas",
    "members",
    "totalLag",
    "maxMemberLag",
    "imbalance",
    "proposal",
    "brokerAssignment",
    "timeLagSeconds",
    "timeLagGoal",
    "stuckPartitions",
)
"""Status figures of a running policy that a policy standing down no longer has (its pods are
gone). `epoch` stays: it is the floor of the next plan's epoch (design §7.4)."""

PolicyKey = tuple[str, str]
"""(namespace, name) of a policy."""

WakeListener = Callable[[frozenset[PolicyKey]], None]
"""listener(keys): the policies whose first rival changed (called from the watch's thread)."""

_API_VERSION = f"{API_GROUP}/{API_VERSION}"

ServersOf = Callable[[str], frozenset[str]]
"""A ConsumerGroupCluster's name -> its normalised bootstrap servers (empty: not known)."""
_NEVER = datetime.max.replace(tzinfo=UTC)


# -- the rule (pure) -----------------------------------------------------------------------------


CLUSTER_TOKEN = "consumergroupcluster/"
"""What a policy with a clusterRef claims instead of servers: the cluster's name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """What one policy claims: a group id on the cluster its bootstrap servers reach."""

    namespace: str
    name: str
    created: datetime | None
    """metadata.creationTimestamp; None (never from the API server) sorts after every time."""
    group_id: str
    servers: frozenset[str]
    """The normalised servers it names inline, or `CLUSTER_TOKEN` + the cluster's name."""
    cluster: str | None = None
    """spec.kafka.clusterRef.name, when it names one."""

    def reach(self, servers_of: ServersOf | None) -> frozenset[str]:
        """What it claims: its own servers, and with a clusterRef the servers its cluster lists."""
        if self.cluster is None or servers_of is None:
            return self.servers
        return self.servers | servers_of(self.cluster)

    @property
    def key(self) -> PolicyKey:
        return self.namespace, self.name

    @property
    def order(self) -> tuple[datetime, str, str]:
        """Earlier is first: creation time, then namespace, then name."""
        return self.created or _NEVER, self.namespace, self.name

    def collides(self, other: Claim, servers_of: ServersOf | None = None) -> bool:
        """Another policy claims this group on this cluster."""
        same_group = other.group_id == self.group_id
        return other.key != self.key and same_group and bool(self.reach(servers_of) & other.reach(servers_of))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def claim_of(body: Mapping[str, Any]) -> Claim | None:
    """The claim of a policy object as written (None: a dry run, or no group id or servers)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    group_id = spec.get("groupId")
    kafka = spec.get("kafka") or {}
    cluster = (kafka.get("clusterRef") or {}).get("name")
    servers = (
        frozenset({f"{CLUSTER_TOKEN}{cluster}"})  # one ConsumerGroupCluster: one Kafka cluster (§15)
        if isinstance(cluster, str) and cluster
        else normalise_servers(str(kafka.get("bootstrapServers") or ""))
    )
    if spec.get("dryRun") is True or not isinstance(group_id, str) or not group_id or not servers:
        return None
    return Claim(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        created=_timestamp(meta.get("creationTimestamp")),
        group_id=group_id,
        servers=servers,
        cluster=cluster if isinstance(cluster, str) and cluster else None,
    )


def first_rival(claim: Claim, claims: Iterable[Claim], servers_of: ServersOf | None = None) -> Claim | None:
    """The first of the claims that collide with `claim` and come before it (None: it is first)."""
    earlier = [other for other in claims if claim.collides(other, servers_of) and other.order < claim.order]
    return min(earlier, key=lambda other: other.order, default=None)


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# -- every policy's claim ------------------------------------------------------------------------


class PolicyClaims:
    """Every watched policy's claim by group id, kept by a watch of the policies (one stream per
    watched namespace, or one cluster-wide). Thread-safe. While the watch is not synced (starting,
    relisting) a lookup lists the policies from the API instead, counted as a cache fallback."""

    def __init__(
        self, client: KubeClient, *, namespaces: Sequence[str] = (), metrics: Metrics | None = None
    ) -> None:
        self._client = client
        self._namespaces = tuple(namespaces)
        self._metrics = metrics
        self._lock = threading.Lock()
        self._by_key: dict[PolicyKey, Claim] = {}
        self._by_group: dict[str, dict[PolicyKey, Claim]] = {}
        self._listeners: list[WakeListener] = []
        self.servers_of: ServersOf | None = None
        """The servers a ConsumerGroupCluster lists (rule 2); set once the cluster book runs."""
        self._watch = WatchCache(client, _API_VERSION, KIND, namespaces=namespaces)
        self._watch.add_listener(self.note)

    def start(self) -> None:
        self._watch.start()

    def stop(self) -> None:
        self._watch.stop(join=0.0)

    def wait_synced(self, timeout: float) -> bool:
        return self._watch.wait_synced(timeout)

    def known_policies(self) -> list[dict[str, Any]]:
        """Every watched policy as the watch holds it (copies), [] while it is not synced."""
        if not self._watch.synced():
            return []
        return self._watch.list(None)

    def first_rival_of(self, claim: Claim) -> Claim | None:
        """The claim `claim` stands down for, from the index (the API while not synced)."""
        if self._watch.synced():
            with self._lock:
                claims = list(self._by_group.get(claim.group_id, {}).values())
        else:
            claims = self._listed(claim.group_id)
        return first_rival(claim, claims, self.servers_of)

    def note(self, event_type: str, body: Mapping[str, Any]) -> None:
        """A policy event of the watch (ADDED, MODIFIED, DELETED): update its claim, and tell the
        listeners which other policies now have another first rival, or none, or one (the policy
        itself is kopf's to start, wake or stop: its own event reaches kopf too)."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        claim = None if event_type == "DELETED" else claim_of(body)
        with self._lock:
            old = self._by_key.get(key)
            if old == claim:
                return  # status writes, other spec fields: no claim changed
            groups = {c.group_id for c in (old, claim) if c is not None}
            before = self._standings(groups)
            if old is not None:
                del self._by_key[key]
                del self._by_group[old.group_id][key]
                if not self._by_group[old.group_id]:
                    del self._by_group[old.group_id]
            if claim is not None:
                self._by_key[key] = claim
                self._by_group.setdefault(claim.group_id, {})[key] = claim
            after = self._standings(groups)
            listeners = tuple(self._listeners)
        changed = frozenset(
            k for k in before.keys() | after.keys() if k != key and before.get(k) != after.get(k)
        )
        for listener in listeners if changed else ():
            try:
                listener(changed)
            except Exception:
                log.exception("listener %r failed on %s", listener, sorted(changed))

    def add_listener(self, listener: WakeListener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: WakeListener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _standings(self, groups: Iterable[str]) -> dict[PolicyKey, PolicyKey | None]:
        """Each claimant of `groups` -> the key of its first rival (None: it is first)."""
        standings: dict[PolicyKey, PolicyKey | None] = {}
        for group in groups:
            claims = list(self._by_group.get(group, {}).values())
            for claim in claims:
                rival = first_rival(claim, claims, self.servers_of)
                standings[claim.key] = None if rival is None else rival.key
        return standings

    def _listed(self, group_id: str) -> list[Claim]:
        if self._metrics is not None:
            self._metrics.cache_fallbacks.labels(KIND).inc()
        claims = []
        for namespace in self._namespaces or (None,):
            for body in self._client.list(_API_VERSION, KIND, namespace):
                claim = claim_of(body)
                if claim is not None and claim.group_id == group_id:
                    claims.append(claim)
        return claims


def start_policy_claims(client: KubeClient, settings: Settings, metrics: Metrics) -> PolicyClaims:
    """The claims of the policies in the watched namespaces, started; waits up to
    `STARTUP_SYNC_S` for the first LIST (until then lookups list from the API)."""
    claims = PolicyClaims(client, namespaces=settings.watch.namespaces, metrics=metrics)
    claims.start()
    if not claims.wait_synced(STARTUP_SYNC_S):
        log.warning("policy claims not synced after %.0fs: judged from the API meanwhile", STARTUP_SYNC_S)
    return claims


# -- the reconcile's step ------------------------------------------------------------------------


def stand_down_if_later(run: RunContext) -> None:
    """Return when the policy may run; otherwise delete its consumer pods, drop its metric
    series and end the run with `Conflict` (Ready=False, Stalled=True: a person must delete or
    change one of the two policies). No claim index (`Deps.claims` None: tools, unit tests of
    one policy): nothing to check."""
    claims, claim = run.deps.claims, claim_of(run.body)
    if claims is None or claim is None:
        return
    try:
        rival = claims.first_rival_of(claim)
        if rival is None:
            return
        _stop_consumers(run)
    except KubeError as e:
        fail(run, "KubernetesUnavailable", str(e), transient=True)
    run.deps.metrics.forget(run.policy.namespace, run.policy.name)
    message = conflict_message(claim, rival, claims.servers_of)
    fail(run, "Conflict", message, transient=False, cleared=STOPPED_FIGURES)


def conflict_message(claim: Claim, rival: Claim, servers_of: ServersOf | None = None) -> str:
    """The condition's message: stable from run to run (the status is written once)."""
    both = claim.reach(servers_of) & rival.reach(servers_of)
    shared = ", ".join(sorted(both, key=lambda server: (server.startswith(CLUSTER_TOKEN), server)))
    when = (
        "in the same second, and its namespace/name sorts first"
        if rival.created == claim.created
        else f"at {_iso(rival.created)}, before this one"
    )
    return (
        f"policy {rival} claims group {claim.group_id} on the same Kafka cluster ({shared}) and was "
        f"created {when}: this policy runs no consumer and publishes no plan until {rival} is "
        "deleted or changes spec.groupId or spec.kafka.bootstrapServers"
    )


def _iso(moment: datetime | None) -> str:
    return "an unknown time" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stop_consumers(run: RunContext) -> None:
    """Delete the policy's consumer pods that are not terminating yet: the group keeps one owner.
    Each replica commits and releases on SIGTERM (design §9); its Lease stays to record that."""
    ns, client = run.policy.namespace, run.deps.client
    for pod in run.deps.reader.list("v1", "Pod", ns, label_selector=owned_selector(run.policy.name)):
        if not (pod.get("metadata") or {}).get("deletionTimestamp"):
            apply(client, None, pod, log=run.log)
