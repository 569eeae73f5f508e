"""The operator's Prometheus metrics (prometheus-client), on their own registry.

Every series of a policy carries `namespace` and `policy`; the operator's own series (its API
requests, its caches) carry neither. Served by `serve` on the metrics port.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ["Metrics"]


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = ("namespace", "policy")
        self.member_lag = Gauge(
            "groupops_member_lag",
            "Lag of the partitions a member owns in the published plan.",
            (*labels, "identity"),
            registry=self.registry,
        )
        self.member_seconds_since_poll = Gauge(
            "groupops_member_seconds_since_poll",
            "Seconds since the member's processing loop last came back to poll, as its last "
            "heartbeat reported (heartbeat liveness only).",
            (*labels, "identity"),
            registry=self.registry,
        )
        self.total_lag = Gauge(
            "groupops_total_lag", "Total lag of the group.", labels, registry=self.registry
        )
        self.imbalance = Gauge(
            "groupops_imbalance",
            "Max member lag over its lower bound (1.0 is perfect).",
            labels,
            registry=self.registry,
        )
        self.epoch = Gauge(
            "groupops_plan_epoch", "Epoch of the published plan.", labels, registry=self.registry
        )
        self.leader = Gauge(
            "groupops_operator_leader",
            "1 while this operator replica leads (runs the reconciles), 0 while it stands by.",
            registry=self.registry,
        )
        self.leader_term = Gauge(
            "groupops_operator_leader_term",
            "The term (election Lease transitions) this replica leads in.",
            registry=self.registry,
        )
        self.plan_writes_refused = Counter(
            "groupops_plan_writes_refused",
            "Plan writes not made: the plan ConfigMap changed since it was read, or names a newer "
            "leader term.",
            labels,
            registry=self.registry,
        )
        self.rebalances = Counter(
            "groupops_rebalances",
            "Plans published, by trigger.",
            (*labels, "trigger"),
            registry=self.registry,
        )
        self.moves = Counter(
            "groupops_partition_moves",
            "Partitions moved between members by published plans.",
            labels,
            registry=self.registry,
        )
        self.reconcile_seconds = Histogram(
            "groupops_reconcile_duration_seconds",
            "Duration of one reconcile.",
            labels,
            registry=self.registry,
        )
        self.handoff_seconds = Histogram(
            "groupops_handoff_duration_seconds",
            "From a partition leaving its owner's set to its release settling (acknowledged or fenced).",
            labels,
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
            registry=self.registry,
        )
        self.broker_matches = Gauge(
            "groupops_native_assignment_matches",
            "Delivery native: 1 when Kafka's assignment equals the prediction, 0 when it differs "
            "(absent while not judged).",
            labels,
            registry=self.registry,
        )
        self.errors = Counter(
            "groupops_reconcile_errors",
            "Failed reconciles, by reason.",
            (*labels, "reason"),
            registry=self.registry,
        )
        self.api_requests = Counter(
            "groupops_operator_api_requests",
            "Requests of the operator to the Kubernetes API, by RBAC verb (get, list, watch, create, "
            "update, patch, delete) and kind; a watch counts once, when it is opened.",
            ("verb", "kind"),
            registry=self.registry,
        )
        self.cache_fallbacks = Counter(
            "groupops_operator_cache_fallbacks",
            "Reads the watch caches passed to the API because the kind's cache was not synced "
            "(starting, or relisting after its watch broke).",
            ("kind",),
            registry=self.registry,
        )

        self.heartbeats = Counter(
            "groupops_operator_heartbeats",
            "Consumer heartbeats this operator answered, by answer (granted, refused, not-leader, "
            "malformed: dropped unanswered).",
            ("answer",),
            registry=self.registry,
        )

        # -- Kafka lag readers (controller/lagfleet.py): one client per connection, batched calls
        self.kafka_admin_clients = Counter(
            "groupops_operator_kafka_admin_clients",
            "Kafka AdminClients created for lag reads, by cluster (bootstrap servers): one per "
            "connection while it is in use, again after an idle close or a refused login.",
            ("cluster",),
            registry=self.registry,
        )
        self.kafka_admin_requests = Counter(
            "groupops_operator_kafka_admin_requests",
            "Admin API calls of the lag reads, by cluster and request (DescribeGroups, DescribeTopics, "
            "OffsetFetch, ListOffsets); a ListOffsets call asks the log starts, or the log ends, of "
            "every partition of every policy read in the same round.",
            ("cluster", "request"),
            registry=self.registry,
        )

    def count_request(self, verb: str, kind: str) -> None:
        self.api_requests.labels(verb, kind).inc()

    def record_members(self, namespace: str, policy: str, lag_by_identity: Mapping[str, int]) -> None:
        for identity, lag in lag_by_identity.items():
            self.member_lag.labels(namespace, policy, identity).set(lag)

    def forget(self, namespace: str, policy: str) -> None:
        """Drop a deleted policy's series (its identities are found from the member gauge)."""
        for metric in (self.total_lag, self.imbalance, self.epoch, self.broker_matches):
            with contextlib.suppress(KeyError):
                metric.remove(namespace, policy)
        for gauge in (self.member_lag, self.member_seconds_since_poll):
            for sample_labels in [
                tuple(labels)
                for labels in list(gauge._metrics)
                if labels[0] == namespace and labels[1] == policy
            ]:
                gauge.remove(*sample_labels)

    def serve(self, host: str, port: int) -> None:
        start_http_server(port, addr=host, registry=self.registry)
