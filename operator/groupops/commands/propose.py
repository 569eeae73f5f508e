"""`groupops propose`: hand the Spark pipeline's `plan` output to the policies it covers, as
proposals a person approves.

    groupops propose --plan DIR [-n NAMESPACE] [--execute] [--output table|json|yaml]
        [--kubeconfig PATH]

DIR is the `plan` job's output (`groupops pipeline plan --out OUT` writes `OUT/plan/`). Each
planned group is matched to the policy that runs it: the same `groupId`, on the cluster the row
names (the offset history's cluster is the brokers the operator read: matched as §6.4 matches
servers, or a ConsumerGroupCluster's name or brokers). A dry run by default: it shows what it
would propose and why it skips the rest (a row the pipeline could not plan, a policy with
`approval: auto`, a member that is not one of the policy's identities). `--execute` writes each
plan into the policy's annotation `groupops.dev/pipeline-plan` (field manager groupops-propose);
the operator proposes it (status.proposal, trigger PipelinePlan) and publishes it once
`spec.rebalance.approvedProposal` names it (`groupops approve`). Reads policies and clusters;
writes only that annotation. Exit codes: 2 for bad input, 1 when the API fails.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from groupops.commands import options
from groupops.commands.errors import RUNTIME_FAILURE, fail
from groupops.commands.options import DocumentOutput
from groupops.controller.cluster_spec import normalise_servers
from groupops.controller.clusters import CLUSTER_KIND
from groupops.controller.names import API_GROUP, API_VERSION, KIND
from groupops.controller.pipeline_plan import MAX_ANNOTATION_BYTES, PIPELINE_PLAN_ANNOTATION, annotation_for
from groupops.kubeapi import Forbidden, KubeClient, KubeError
from groupops.model import TopicPartition

__all__ = ["proposals", "read_plan_rows", "register"]

_API_VERSION = f"{API_GROUP}/{API_VERSION}"
FIELD_MANAGER = "groupops-propose"


def register(app: typer.Typer) -> None:
    app.command("propose")(propose_command)


def propose_command(
    *,
    plan: Annotated[Path, typer.Option("--plan", help="The plan job's output directory (OUT/plan).")],
    namespace: Annotated[
        str | None, options.namespace("Only this namespace's policies (default: every namespace).")
    ] = None,
    execute: Annotated[
        bool, typer.Option("--execute", help="Write the proposals (default: show what would be written).")
    ] = False,
    output: Annotated[DocumentOutput, options.output()] = DocumentOutput.table,
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", help="Path of a kubeconfig.")] = None,
) -> None:
    """Propose the pipeline's plans to the policies that run those groups (dry run by default)."""
    rows = read_plan_rows(plan)
    try:
        client = KubeClient.from_environment(kubeconfig=kubeconfig, timeout=10.0, field_manager=FIELD_MANAGER)
        policies = client.list(_API_VERSION, KIND, namespace)
        try:
            clusters = client.list(_API_VERSION, CLUSTER_KIND, None)
        except (Forbidden, KubeError):  # no right to read them, or no such kind: inline brokers only
            clusters = []
    except KubeError as e:
        fail(f"cannot read the Kubernetes API: {e}", code=RUNTIME_FAILURE)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    found = proposals(rows, policies, clusters, source=str(plan), created_at=now)
    if execute:
        for item in found:
            if item["action"] != "propose":
                continue
            patch = {"metadata": {"annotations": {PIPELINE_PLAN_ANNOTATION: item.pop("annotation")}}}
            try:
                client.patch(_API_VERSION, KIND, item["namespace"], item["name"], patch)
            except KubeError as e:
                fail(
                    f"cannot write the proposal of {item['namespace']}/{item['name']}: {e}",
                    code=RUNTIME_FAILURE,
                )
            item["action"] = "proposed"
    for item in found:
        item.pop("annotation", None)
    if output is DocumentOutput.table:
        _print_table(found, execute=execute)
    else:
        options.print_document({"plan": str(plan), "executed": execute, "policies": found}, output)


def read_plan_rows(directory: Path) -> list[dict[str, Any]]:
    """The plan job's rows (Parquet, read with pyarrow: no Spark needed); exit 2 naming --plan."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - only this command reads Parquet

    if not directory.exists():
        fail(f"{directory} does not exist: give the plan job's output, OUT/plan (--plan)")
    try:
        table = pq.read_table(directory)
    except (OSError, ValueError) as e:
        fail(f"{directory} is not a Parquet dataset the plan job wrote: {e} (--plan)")
    wanted = {"cluster", "group", "member", "partitions"}
    missing = wanted - set(table.column_names)
    if missing:
        fail(f"{directory} has no column {', '.join(sorted(missing))}: is it the plan job's output? (--plan)")
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def proposals(
    rows: Sequence[Mapping[str, Any]],
    policies: Sequence[Mapping[str, Any]],
    clusters: Sequence[Mapping[str, Any]],
    *,
    source: str,
    created_at: str,
) -> list[dict[str, Any]]:
    """One entry per policy whose group the plan covers: action "propose" (with the annotation to
    write) or "skipped" with the reason; sorted by namespace and name."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault((str(row["cluster"]), str(row["group"])), []).append(row)
    brokers_of = {
        str(c["metadata"]["name"]): normalise_servers(
            str((c.get("spec") or {}).get("bootstrapServers") or "")
        )
        for c in clusters
    }
    found = []
    for body in policies:
        meta, spec = body.get("metadata") or {}, body.get("spec") or {}
        matched = [
            key for key in groups if key[1] == spec.get("groupId") and _same_cluster(key[0], spec, brokers_of)
        ]
        if not matched:
            continue
        cluster, group = matched[0]
        item = _proposal(body, groups[(cluster, group)], source=source, created_at=created_at)
        found.append(
            {
                "namespace": meta.get("namespace"),
                "name": meta.get("name"),
                "group": group,
                "cluster": cluster,
                **item,
            }
        )
    return sorted(found, key=lambda item: (str(item["namespace"]), str(item["name"])))


def _same_cluster(
    row_cluster: str, spec: Mapping[str, Any], brokers_of: Mapping[str, frozenset[str]]
) -> bool:
    kafka = spec.get("kafka") or {}
    named = (kafka.get("clusterRef") or {}).get("name")
    if named is not None:
        return row_cluster == named or bool(
            brokers_of.get(named, frozenset()) & normalise_servers(row_cluster)
        )
    return bool(normalise_servers(str(kafka.get("bootstrapServers") or "")) & normalise_servers(row_cluster))


def _proposal(
    body: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], *, source: str, created_at: str
) -> dict[str, Any]:
    spec, status = body.get("spec") or {}, body.get("status") or {}
    first = rows[0]
    members = sorted(str(row["member"]) for row in rows if row.get("member"))
    figures = {
        "members": members,
        "moves": first.get("moves"),
        "imbalance": first.get("imbalance"),
        "strategy": first.get("strategy"),
    }
    errors = [str(row["error"]) for row in rows if row.get("error")]
    if errors:
        return {
            **figures,
            "action": "skipped",
            "reason": f"the pipeline could not plan the group: {errors[0]}",
        }
    if (spec.get("rebalance") or {}).get("approval") != "manual":
        return {
            **figures,
            "action": "skipped",
            "reason": "approval is auto: a plan from history would apply unseen; set "
            "spec.rebalance.approval: manual to review it",
        }
    replicas = status.get("replicas") or (spec.get("consumers") or {}).get("replicas") or 0
    identity = re.compile(rf"^{re.escape(str(spec.get('groupId')))}-(\d+)$")
    strangers = [
        m for m in members if not ((match := identity.match(m)) and int(match.group(1)) < int(replicas))
    ]
    if strangers:
        return {
            **figures,
            "action": "skipped",
            "reason": f"{', '.join(strangers)} is not an identity of this policy now ({replicas} replicas)",
        }
    assignment = {
        str(row["member"]): [
            TopicPartition(str(p["topic"]), int(p["partition"])) for p in row["partitions"] or []
        ]
        for row in rows
    }
    annotation = annotation_for(assignment, source=source, created_at=created_at)
    if len(annotation.encode()) > MAX_ANNOTATION_BYTES:
        return {
            **figures,
            "action": "skipped",
            "reason": f"the plan is larger than {MAX_ANNOTATION_BYTES:,} bytes",
        }
    return {**figures, "action": "propose", "annotation": annotation}


def _print_table(found: list[dict[str, Any]], *, execute: bool) -> None:
    console = Console()
    table = Table(show_edge=False, pad_edge=False)
    for title in ("POLICY", "GROUP", "CLUSTER", "MEMBERS", "MOVES", "IMBALANCE", "ACTION"):
        table.add_column(title, justify="right" if title in ("MOVES", "IMBALANCE") else "left")
    for item in found:
        action = item["action"]
        if action == "propose":
            action = "would propose (--execute writes it)"
        elif action == "skipped":
            action = f"skipped: {item['reason']}"
        table.add_row(
            f"{item['namespace']}/{item['name']}",
            str(item["group"]),
            str(item["cluster"]),
            str(len(item["members"])),
            "-" if item["moves"] is None else str(item["moves"]),
            "-" if item["imbalance"] is None else f"{item['imbalance']:.2f}",
            action,
        )
    console.print(table)
    if not found:
        console.print("no policy runs a group of this plan")
    elif execute:
        console.print("approve each with `groupops approve NAME -n NAMESPACE` once status.proposal shows it")
