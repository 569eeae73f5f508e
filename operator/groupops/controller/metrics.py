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
        self._set_last: dict[tuple[int, str, str], dict[str, float]] = {}
        """(gauge, namespace, policy) -> the third label's values `_replace_series` set last."""
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
        # -- time lag and stuck partitions (controller/lagstate.py; lagSource kafka only)
        self.time_lag = Gauge(
            "groupops_time_lag_seconds",
            "Seconds the group is behind: the largest time lag of its partitions at the newest lag "
            "read (docs/design.md §4). Absent while unknown (a lag source without offsets).",
            labels,
            registry=self.registry,
        )
        self.time_lag_goal = Gauge(
            "groupops_time_lag_goal_seconds",
            "The policy's spec.targetTimeLagSeconds (absent when it sets none): the alert's and the "
            "dashboard's goal line.",
            labels,
            registry=self.registry,
        )
        self.member_time_lag = Gauge(
            "groupops_member_time_lag_seconds",
            "The largest time lag of the partitions a member owns in the published plan (0 when it "
            "owns none).",
            (*labels, "identity"),
            registry=self.registry,
        )
        self.partition_status = Gauge(
            "groupops_partition_status",
            "Partitions of the group per state of Burrow's rules at the newest lag read: OK, STALL, "
            "STOP, REWIND (one series per state, not per partition).",
            (*labels, "state"),
            registry=self.registry,
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
        self.run_wait_seconds = Histogram(
            "groupops_operator_run_wait_seconds",
            "How long a policy's run waited for a worker of its lane (routine: the tick's runs; "
            "urgent: runs a Lease, a Pod or the spec woke, docs/design.md §8.3), by cause "
            "(tick; container: a consumer container started or ended; expiry: a held Lease ran "
            "out by the policy's clock; woken: anything else). Urgent waits of seconds mean "
            "failover is waiting for the operator, not for the replicas.",
            ("lane", "cause"),
            buckets=(0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0),
            registry=self.registry,
        )
        self.event_loop_lag_seconds = Histogram(
            "groupops_operator_event_loop_lag_seconds",
            "How late the event loop that carries every watch event and wake-up to the policies' "
            "loops ran a timer (sampled every 0.5 s); seconds here delay every failover.",
            buckets=(0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
            registry=self.registry,
        )
        self.heartbeat_report_delay_seconds = Histogram(
            "groupops_operator_heartbeat_report_delay_seconds",
            "From the answering process sending a report of the heartbeats it granted (every "
            "0.1 s) to the operator applying it. The operator judges no replica silent beyond the "
            "last report it applied, so a delay of seconds holds back crash failover by as much "
            "(docs/design.md §7.5).",
            buckets=(0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
            registry=self.registry,
        )
        self.heartbeat_socket_wait_seconds = Histogram(
            "groupops_operator_heartbeat_socket_wait_seconds",
            "How long a heartbeat waited in the answering socket before it was read (the kernel's "
            "receive time to the read), for the oldest heartbeat of each burst: the answerer's own "
            "lateness. A replica asks again after 3/8 of its heartbeat interval and falls back to "
            "a Lease write after 3/4 (docs/design.md §7.5).",
            buckets=(0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0),
            registry=self.registry,
        )
        self.reconciles_skipped = Counter(
            "groupops_reconciles_skipped",
            "Routine runs (the tick's) of a settled policy that found nothing changed and stopped "
            "after the lag read (docs/design.md §8.3); not counted in "
            "groupops_reconcile_duration_seconds.",
            labels,
            registry=self.registry,
        )
        self.settled_checks = Counter(
            "groupops_operator_settled_checks",
            "Checks of parked settled policies by the settled sweep, whatever they found "
            "(docs/design.md §8.3).",
            registry=self.registry,
        )
        self.settled_check_cpu_seconds = Counter(
            "groupops_operator_settled_check_cpu_seconds",
            "CPU seconds the settled sweep's thread spent on its checks (the lag reads they start "
            "run on the lag pool and are not counted): divided by groupops_operator_settled_checks_total, "
            "what one check of a settled policy costs the operator.",
            registry=self.registry,
        )
        self.status_figures_held = Counter(
            "groupops_status_figures_held",
            "Runs whose only status change was lag figures, held back because status was written "
            "less than --status-figures-interval ago (docs/design.md §8.3); the figures' metrics "
            "(groupops_total_lag and the others) are always current.",
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
        # -- what the alerts and the dashboard watch (charts/groupops/files/)
        self.lag_source_up = Gauge(
            "groupops_lag_source_up",
            "1 when the policy's newest lag read succeeded, 0 while it fails (the policy plans on "
            "the last known lag or on partition counts and is Degraded); source is its "
            "lagSource.type. Absent until its first read answers.",
            (*labels, "source"),
            registry=self.registry,
        )
        self.lag_read_failures = Counter(
            "groupops_lag_read_failures",
            "Reconciles that found the policy's newest lag read failed, by source type: counted "
            "once per reconcile, not once per read (a run while a slow read is still in flight "
            "counts the previous failure again).",
            (*labels, "source"),
            registry=self.registry,
        )
        self.lag_age_seconds = Gauge(
            "groupops_lag_age_seconds",
            "Seconds since the policy's newest successful lag read, as its last reconcile took it: "
            "the age of the lag it planned with (about 0 after a fresh read, growing while reads "
            "fail). Absent until a read succeeded since the operator started.",
            labels,
            registry=self.registry,
        )
        self.members_behind_plan = Gauge(
            "groupops_members_behind_plan",
            "Members of the published plan whose Lease has not acknowledged its epoch yet, "
            "leaving out void Leases (released or fenced, and not acknowledged since); 0 with "
            "delivery native (its replicas acknowledge no epoch).",
            labels,
            registry=self.registry,
        )
        self.handoffs_in_flight = Gauge(
            "groupops_handoffs_in_flight",
            "Partitions being released by their previous owner: pending releases of the plan in "
            "force after the policy's last reconcile.",
            labels,
            registry=self.registry,
        )
        self.oldest_handoff_seconds = Gauge(
            "groupops_oldest_handoff_seconds",
            "Wall-clock seconds since the oldest pending release of the plan in force was "
            "published (0 when none).",
            labels,
            registry=self.registry,
        )
        self.cluster_handoffs_in_flight = Gauge(
            "groupops_cluster_handoffs_in_flight",
            "Policies of a ConsumerGroupCluster with partitions moving between replicas (what its "
            "disruptionBudget.maxHandoffsInFlight limits).",
            ("cluster",),
            registry=self.registry,
        )
        self.cluster_waiting_for_budget = Gauge(
            "groupops_cluster_waiting_for_budget",
            "Policies of a ConsumerGroupCluster whose chosen rebalance waits for its disruption budget.",
            ("cluster",),
            registry=self.registry,
        )
        self.budget_holds = Counter(
            "groupops_budget_holds",
            "Runs whose chosen rebalance the cluster's disruption budget held back.",
            ("cluster",),
            registry=self.registry,
        )
        self.fences = Counter(
            "groupops_fences",
            "Identities fenced by the operator: successful fence writes on a Lease that expired "
            "(or was never taken) while its holder might hold partitions; failovers.",
            labels,
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
            "Consumer heartbeats this operator answered, by answer (granted, refused, refused-stuck: "
            "its progress exceeds maxPollIntervalSeconds, not-leader, malformed: dropped unanswered).",
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

    def record_settled_round(self, checks: int, cpu_s: float) -> None:
        self.settled_checks.inc(checks)
        self.settled_check_cpu_seconds.inc(cpu_s)

    def record_members(self, namespace: str, policy: str, lag_by_identity: Mapping[str, int]) -> None:
        for identity, lag in lag_by_identity.items():
            self.member_lag.labels(namespace, policy, identity).set(lag)

    def record_time_lag(
        self, namespace: str, policy: str, group: float | None, members: Mapping[str, float]
    ) -> None:
        """Set the group's and each member's time lag, dropping members no longer listed; with
        `group` None (unknown) drop the policy's time-lag series."""
        if group is None:
            with contextlib.suppress(KeyError):
                self.time_lag.remove(namespace, policy)
        else:
            self.time_lag.labels(namespace, policy).set(group)
        self._replace_series(self.member_time_lag, namespace, policy, members)

    def record_time_lag_goal(self, namespace: str, policy: str, goal: float | None) -> None:
        """Set the policy's time-lag goal (None: it has none, the series is dropped)."""
        if goal is None:
            with contextlib.suppress(KeyError):
                self.time_lag_goal.remove(namespace, policy)
        else:
            self.time_lag_goal.labels(namespace, policy).set(goal)

    def record_partition_states(self, namespace: str, policy: str, counts: Mapping[str, int] | None) -> None:
        """Set the partitions per state (None: unknown, the policy's series are dropped)."""
        self._replace_series(self.partition_status, namespace, policy, counts or {})

    def record_cluster(self, cluster: str, *, in_flight: int, waiting: int) -> None:
        self.cluster_handoffs_in_flight.labels(cluster).set(in_flight)
        self.cluster_waiting_for_budget.labels(cluster).set(waiting)

    def forget_cluster(self, cluster: str) -> None:
        """Drop a deleted ConsumerGroupCluster's series."""
        for metric in (self.cluster_handoffs_in_flight, self.cluster_waiting_for_budget, self.budget_holds):
            with contextlib.suppress(KeyError):
                metric.remove(cluster)

    def record_lag_source(self, namespace: str, policy: str, source: str, *, up: bool) -> None:
        """Set the policy's `lag_source_up` for `source`, dropping the series of a source type the
        policy used before (a switch away from a broken source must not leave it reading 0)."""
        self._replace_series(self.lag_source_up, namespace, policy, {source: 1 if up else 0})

    def _replace_series(self, gauge: Gauge, namespace: str, policy: str, values: Mapping[str, float]) -> None:
        """Make the policy's series of `gauge` (labelled namespace, policy and one more) exactly
        `values`. What was set last time is remembered per policy, so a reconcile never scans the
        series of every other policy (thousands of them, at every tick), and a settled policy's
        check that finds the same values sets nothing."""
        key = (id(gauge), namespace, policy)
        last = self._set_last.get(key, {})
        if last == values:
            return
        for gone in last.keys() - values.keys():
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, policy, gone)
        for label, value in values.items():
            gauge.labels(namespace, policy, label).set(value)
        self._set_last[key] = dict(values)

    def forget(self, namespace: str, policy: str) -> None:
        """Drop every series of a deleted policy (counters and histograms too: a policy created
        again under the same name starts from nothing, and a deleted one leaves no series)."""
        for metric in (
            self.total_lag,
            self.time_lag,
            self.time_lag_goal,
            self.imbalance,
            self.epoch,
            self.broker_matches,
            self.lag_age_seconds,
            self.members_behind_plan,
            self.handoffs_in_flight,
            self.oldest_handoff_seconds,
            self.fences,
            self.plan_writes_refused,
            self.moves,
            self.reconcile_seconds,
            self.reconciles_skipped,
            self.status_figures_held,
            self.handoff_seconds,
        ):
            with contextlib.suppress(KeyError):
                metric.remove(namespace, policy)
        for labelled in (
            self.member_lag,
            self.member_time_lag,
            self.partition_status,
            self.member_seconds_since_poll,
            self.lag_source_up,
            self.lag_read_failures,
            self.rebalances,
            self.errors,
        ):
            for labels in _series_of(labelled, namespace, policy):
                labelled.remove(*labels)
            self._set_last.pop((id(labelled), namespace, policy), None)

    def serve(self, host: str, port: int) -> None:
        start_http_server(port, addr=host, registry=self.registry)


def _series_of(metric: Gauge | Counter | Histogram, namespace: str, policy: str) -> list[tuple[str, ...]]:
    """The label values of the policy's series of a metric labelled (namespace, policy, ...)."""
    return [
        tuple(labels) for labels in list(metric._metrics) if labels[0] == namespace and labels[1] == policy
    ]
