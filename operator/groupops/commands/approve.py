"""`groupops approve`: publish the proposal a policy with `approval: manual` waits on.

    groupops approve POLICY [-n NAMESPACE] [--proposal ID] [--wait/--no-wait] [--timeout S]
        [--kubeconfig PATH]

It sets `spec.rebalance.approvedProposal` to the proposal's id (the standing one when no
`--proposal` is given) and, by default, waits until the operator published it
(`status.approvedProposal`). An id approves once: a later proposal has another id
(docs/design.md §13.1). A policy kept in Git is approved by committing the same field there:
otherwise the GitOps tool's self-heal puts Git's value back. Exit codes: 2 for bad options or no
such proposal, 1 when the operator did not publish it in time.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from groupops.commands.errors import RUNTIME_FAILURE, fail
from groupops.commands.options import namespace as namespace_option
from groupops.controller.names import API_GROUP, API_VERSION, KIND
from groupops.kubeapi import KubeClient, KubeError

__all__ = ["register"]

_POLL_S = 0.5
FIELD_MANAGER = "groupops-approve"
"""A field manager of its own: the approval is a person's write, not the operator's."""


def register(app: typer.Typer) -> None:
    app.command("approve")(approve_command)


def approve_command(
    policy: Annotated[str, typer.Argument(help="The ConsumerGroupPolicy whose proposal to publish.")],
    *,
    namespace: Annotated[str, namespace_option("The policy's namespace.")] = "default",
    proposal: Annotated[
        str | None,
        typer.Option("--proposal", help="The id status.proposal.id shows (default: the standing proposal)."),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until it is published.")] = True,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the operator.")] = 120.0,
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", help="Path of a kubeconfig.")] = None,
) -> None:
    """Approve a policy's standing proposal by its id (approval: manual)."""
    api_version = f"{API_GROUP}/{API_VERSION}"
    try:
        client = KubeClient.from_environment(kubeconfig=kubeconfig, timeout=10.0, field_manager=FIELD_MANAGER)
        body = client.get(api_version, KIND, namespace, policy)
    except KubeError as e:
        fail(f"no Kubernetes API: {e}", code=RUNTIME_FAILURE)
    if body is None:
        fail(f"no ConsumerGroupPolicy {policy!r} in namespace {namespace!r}")
    chosen = _chosen(body, proposal)
    patch = {"spec": {"rebalance": {"approvedProposal": chosen}}}
    try:
        client.patch(api_version, KIND, namespace, policy, patch)
    except KubeError as e:
        fail(f"cannot approve {chosen}: {e}", code=RUNTIME_FAILURE)
    typer.echo(f"approved proposal {chosen} of {namespace}/{policy}")
    if wait:
        epoch = _wait_published(
            client, api_version, namespace=namespace, policy=policy, proposal=chosen, timeout=timeout
        )
        typer.echo(f"proposal {chosen} published as epoch {epoch}")


def _chosen(body: dict[str, Any], proposal: str | None) -> str:
    spec, status = body.get("spec") or {}, body.get("status") or {}
    if (spec.get("rebalance") or {}).get("approval") != "manual":
        fail("the policy's spec.rebalance.approval is not manual: its plans need no approval")
    standing = (status.get("proposal") or {}).get("id")
    if standing is None:
        fail("no proposal waits for approval (status.proposal is empty)")
    if proposal is not None and proposal != standing:
        applied = " (it was applied already)" if proposal == status.get("approvedProposal") else ""
        fail(f"--proposal {proposal} is not the standing proposal {standing}{applied}")
    return str(standing)


def _wait_published(
    client: KubeClient, api_version: str, *, namespace: str, policy: str, proposal: str, timeout: float
) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = (client.get(api_version, KIND, namespace, policy) or {}).get("status") or {}
        except KubeError:
            status = {}
        if status.get("approvedProposal") == proposal:
            return int(status.get("epoch") or 0)
        time.sleep(_POLL_S)
    fail(
        f"the operator did not publish proposal {proposal} within {timeout:g} s; the approval stays "
        "in spec.rebalance.approvedProposal and status shows what happens",
        code=RUNTIME_FAILURE,
    )
