"""The operator killed (SIGKILL) in the middle of reconciles and started again converges: no
duplicate pods, every identity once, and the plan's epoch never goes back."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.operator_support import (
    Kubectl,
    OperatorProcess,
    cgp,
    create_namespace,
    plan_of,
    settled,
)
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def namespace(kubectl: Kubectl, unique_name: Any) -> str:
    name: str = unique_name("restart")
    create_namespace(kubectl, name)
    return name


def manifest(replicas: int, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": "crashy"},
        "spec": {
            "kafka": {"bootstrapServers": "127.0.0.1:9092"},
            "groupId": "crashy",
            "topics": ["a", "b"],
            "strategy": {"type": "balanced"},
            "lagSource": {
                "type": "static",
                "static": {"lags": {"a": [9, 8, 7, 6, 5, 4], "b": [100, 1, 1, 1]}},
            },
            "consumers": {
                "replicas": replicas,
                "template": {"spec": {"containers": [{"name": "consumer", "image": image}]}},
            },
        },
    }


def test_killed_mid_reconcile_converges_without_duplicates_or_epoch_regression(
    kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    rng = random.Random(4)
    epochs: list[int] = []

    def observe() -> None:
        configmap = kubectl.get_json("configmap", "crashy-plan", namespace)
        if configmap is not None:
            epoch = int(configmap["data"]["epoch"])
            assert not epochs or epoch >= epochs[-1], f"epoch went back: {epochs} then {epoch}"
            epochs.append(epoch)
        names = [
            p["metadata"]["name"] for p in kubectl.items("pods", namespace, "groupops.dev/policy=crashy")
        ]
        assert len(names) == len(set(names))

    kubectl.apply(manifest(3, "c:1"), namespace)
    wait_for("the first plan", settled(kubectl, namespace, "crashy"), timeout=60)
    changes = [(5, "c:1"), (5, "c:2"), (2, "c:2"), (4, "c:3"), (1, "c:3"), (3, "c:4")]
    for replicas, image in changes:
        operator.wait_started()
        kubectl.apply(manifest(replicas, image), namespace)
        # Somewhere inside the reconcile of that change or the handoff steps that follow it (the
        # operator reacts within milliseconds and ticks every second).
        time.sleep(rng.uniform(0.05, 1.5))
        operator.kill()
        observe()
        operator.start()
        observe()

    replicas, image = changes[-1]

    def converged() -> dict[str, Any] | None:
        observe()
        current = settled(kubectl, namespace, "crashy")()
        pods = kubectl.items("pods", namespace, "groupops.dev/policy=crashy")
        names = sorted(p["metadata"]["name"] for p in pods)
        images = {p["spec"]["containers"][0]["image"] for p in pods}
        plan = plan_of(kubectl, namespace, "crashy")
        identities = sorted(k for k in plan if k not in ("epoch", "strategy"))
        ok = (
            current is not None
            and names == [f"crashy-{i}" for i in range(replicas)]
            and images == {image}
            and identities == [f"crashy-{i}" for i in range(replicas)]
            and sum(len(m["partitions"]) for m in current["status"]["members"]) == 10
            # status is written after the plan it reports: converged once both name the same epoch
            and current["status"]["epoch"] == int(plan["epoch"])
        )
        return current if ok else None

    def state() -> str:
        pods = kubectl.items("pods", namespace, "groupops.dev/policy=crashy")
        shown = {
            "pods": sorted((p["metadata"]["name"], p["spec"]["containers"][0]["image"]) for p in pods),
            "plan": plan_of(kubectl, namespace, "crashy"),
            "status": (kubectl.get_json("cgp", "crashy", namespace) or {}).get("status"),
        }
        return f"{shown}\n--- the last operator's threads ---\n{operator.stacks()}"

    final = wait_for("convergence after the restarts", converged, timeout=120, explain=state)
    assert final["status"]["epoch"] >= max(epochs)
    leases = kubectl.items("leases", namespace, "groupops.dev/policy=crashy")
    assert sorted(lease["metadata"]["name"] for lease in leases) == [
        f"crashy-crashy-{i}" for i in range(replicas)
    ]
    assert operator.starts == len(changes) + 1
    assert cgp(kubectl, namespace, "crashy")["status"]["replicas"] == replicas


def test_usr1_prints_every_thread_and_the_operator_goes_on(
    kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    """docs/operations.md "Where a stuck process waits": the dump a stuck policy's report needs,
    taken from a live operator without stopping it."""
    operator.wait_started()
    dump = operator.stacks()
    threads = dump.count("Thread 0x")
    assert threads >= 3, f"expected the stack of every thread, got:\n{dump}"
    assert "groupops/controller/" in dump and "kopf" in dump, dump
    assert operator.process is not None
    children = Path(f"/proc/{operator.process.pid}/task/{operator.process.pid}/children").read_text().split()
    assert children, "the heartbeat answering process is a child of the operator"
    before = operator.log_path.stat().st_size
    for child in children:  # the answering process dumps too: the operator would exit if it died
        os.kill(int(child), signal.SIGUSR1)
    wait_for("the answering process's stacks", lambda: "heartbeat_process.py" in _since(operator, before))
    assert operator.alive()
    kubectl.apply(manifest(2, "c:1"), namespace)
    wait_for("a plan after the dump", settled(kubectl, namespace, "crashy"), timeout=60)


def _since(operator: OperatorProcess, offset: int) -> str:
    return operator.log_path.read_bytes()[offset:].decode(errors="replace")
