"""`groupops fleet`: every policy of a Kafka cluster, furthest from its goal first.

    groupops fleet [CLUSTER] [-n NAMESPACE | --all-namespaces] [--output table|json|yaml]
        [--kubeconfig PATH]

CLUSTER is a ConsumerGroupCluster's name: its policies (spec.kafka.clusterRef) and its fleet
status. Without it, every policy, with the cluster each names (a clusterRef, or its brokers as
written). Rows are sorted by how far each group is from its goal: time lag over
spec.targetTimeLagSeconds when it has one, else its imbalance (the ClusterBook's `badness_of`,
the order the disruption budget serves them in). Columns: lag, time lag and goal, imbalance, stuck
partitions, last rebalance, partitions in flight (pending releases of its plan) and what its plan
waits for. Reads only: policies, their plan ConfigMaps and the cluster. Exit codes: 2 for bad
input (no such cluster), 1 when the API cannot be read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from groupops.commands import options
from groupops.commands.errors import RUNTIME_FAILURE, fail
from groupops.commands.options import DocumentOutput
from groupops.controller.clusters import CLUSTER_KIND, badness_of
from groupops.controller.decide import seconds_since
from groupops.controller.names import API_GROUP, API_VERSION, KIND, LABEL_MANAGED_BY, MANAGED_BY
from groupops.kubeapi import KubeClient, KubeError
from groupops.planner.plan_format import plan_from_configmap

__all__ = ["fleet_rows", "register"]

_API_VERSION = f"{API_GROUP}/{API_VERSION}"


def register(app: typer.Typer) -> None:
    app.command("fleet")(fleet_command)


def fleet_command(
    cluster: Annotated[
        str | None, typer.Argument(help="A ConsumerGroupCluster: its policies only, and its fleet status.")
    ] = None,
    *,
    namespace: Annotated[
        str | None, options.namespace("Only this namespace's policies (default: every namespace).")
    ] = None,
    output: Annotated[DocumentOutput, options.output()] = DocumentOutput.table,
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", help="Path of a kubeconfig.")] = None,
) -> None:
    """Every policy of a cluster sorted by how far it is from its goal."""
    try:
        client = KubeClient.from_environment(kubeconfig=kubeconfig, timeout=10.0)
        fleet_status = None
        if cluster is not None:
            body = client.get(_API_VERSION, CLUSTER_KIND, None, cluster)
            if body is None:
                fail(f"no ConsumerGroupCluster {cluster!r} (kubectl get consumergroupclusters)")
            fleet_status = body.get("status") or {}
        policies = client.list(_API_VERSION, KIND, namespace)
        configmaps = client.list(
            "v1", "ConfigMap", namespace, label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY}"
        )
    except KubeError as e:
        fail(f"cannot read the Kubernetes API: {e}", code=RUNTIME_FAILURE)
    rows = fleet_rows(policies, configmaps, cluster=cluster, now=datetime.now(UTC))
    if output is DocumentOutput.table:
        _print_table(rows, cluster, fleet_status)
    else:
        document: dict[str, Any] = {"cluster": cluster, "policies": rows}
        if fleet_status is not None:
            document["status"] = fleet_status
        options.print_document(document, output)


def fleet_rows(
    policies: Sequence[Mapping[str, Any]],
    configmaps: Sequence[Mapping[str, Any]],
    *,
    cluster: str | None,
    now: datetime,
) -> list[dict[str, Any]]:
    """One row per policy (of `cluster` when given), furthest from its goal first."""
    in_flight = {
        (str(cm["metadata"].get("namespace")), str(cm["metadata"]["name"]).removesuffix("-plan")): len(
            plan_from_configmap(cm.get("data") or {}, cm["metadata"].get("annotations")).releasing
        )
        for cm in configmaps
        if str(cm["metadata"]["name"]).endswith("-plan")
    }
    rows = []
    for body in policies:
        meta, spec, status = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
        kafka = spec.get("kafka") or {}
        named = (kafka.get("clusterRef") or {}).get("name")
        if cluster is not None and named != cluster:
            continue
        key = (str(meta.get("namespace")), str(meta.get("name")))
        time_lag = status.get("timeLagSeconds")
        goal = spec.get("targetTimeLagSeconds")
        imbalance = float(status.get("imbalance") or 1.0)
        rows.append(
            {
                "namespace": key[0],
                "name": key[1],
                "group": spec.get("groupId"),
                "cluster": named or kafka.get("bootstrapServers"),
                "fromGoal": round(
                    badness_of(imbalance, time_lag if isinstance(time_lag, (int, float)) else None, goal), 3
                ),
                "totalLag": status.get("totalLag"),
                "timeLagSeconds": time_lag,
                "targetTimeLagSeconds": goal,
                "imbalance": status.get("imbalance"),
                "stuckPartitions": len(status.get("stuckPartitions") or []),
                "lastRebalance": status.get("lastRebalance"),
                "sinceRebalanceSeconds": _rounded(seconds_since(status.get("lastRebalance"), now)),
                "partitionsInFlight": in_flight.get(key, 0),
                "plan": _plan_state(status),
            }
        )
    return sorted(rows, key=lambda r: (-r["fromGoal"], r["namespace"], r["name"]))


def _plan_state(status: Mapping[str, Any]) -> str:
    """The Ready reason when not ready, else the PlanApplied reason (Published, WaitingForBudget,
    AwaitingApproval, ...); "-" before the first run."""
    reasons = {c.get("type"): (c.get("status"), c.get("reason")) for c in status.get("conditions") or []}
    ready = reasons.get("Ready")
    if ready is not None and ready[0] != "True":
        return str(ready[1])
    applied = reasons.get("PlanApplied")
    return str(applied[1]) if applied else "-"


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds)


def _print_table(rows: list[dict[str, Any]], cluster: str | None, status: Mapping[str, Any] | None) -> None:
    console = Console()
    if status is not None:
        used = status.get("budgetUsed") or {}
        console.print(
            f"[bold]{cluster}[/]: {status.get('policies', 0)} policies, "
            f"total lag {status.get('totalLag', 0):,}, "
            f"worst time lag {_seconds(status.get('worstTimeLagSeconds'))}, "
            f"{status.get('handoffsInFlight', 0)} handoffs in flight"
            + (f" (budget {used['handoffs']})" if "handoffs" in used else "")
            + f", {status.get('waitingForBudget', 0)} waiting for the budget"
        )
    table = Table(show_edge=False, pad_edge=False)
    for title in ("POLICY", "GROUP", "CLUSTER", "FROM GOAL", "LAG", "TIME LAG", "GOAL", "IMBALANCE", "STUCK",
                  "LAST REBALANCE", "IN FLIGHT", "PLAN"):  # fmt: skip
        table.add_column(
            title, justify="right" if title not in ("POLICY", "GROUP", "CLUSTER", "PLAN") else "left"
        )
    for row in rows:
        table.add_row(
            f"{row['namespace']}/{row['name']}",
            str(row["group"]),
            str(row["cluster"]),
            f"{row['fromGoal']:.2f}",
            "-" if row["totalLag"] is None else f"{row['totalLag']:,}",
            _seconds(row["timeLagSeconds"]),
            _seconds(row["targetTimeLagSeconds"]),
            "-" if row["imbalance"] is None else f"{row['imbalance']:.2f}",
            str(row["stuckPartitions"]),
            "-" if row["sinceRebalanceSeconds"] is None else f"{_seconds(row['sinceRebalanceSeconds'])} ago",
            str(row["partitionsInFlight"]),
            row["plan"],
        )
    console.print(table)
    if not rows:
        console.print("no policies" + (f" name ConsumerGroupCluster {cluster}" if cluster else ""))


def _seconds(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    if value >= 3600:
        return f"{value / 3600:.1f}h"
    if value >= 120:
        return f"{value / 60:.0f}m"
    return f"{value:.0f}s"
