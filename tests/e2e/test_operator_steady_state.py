"""A settled policy costs the API server nothing: its daemon reconciles every tick (--tick 1),
and the operator's request counter shows no GET or LIST of the objects a policy owns (nor of its
auth Secret) between two scrapes 10 s apart; those kinds are only watched. The only other
requests are the leader election's renewals of its own Lease. And what it skips is never drift:
a replica's Role widened by hand and its RoleBinding deleted come back as rendered."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from groupops.controller.names import consumer_account_name
from tests.e2e.operator_support import Kubectl, OperatorProcess, settled
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

POLICY = "quiet"
OWNED = ("ConfigMap", "Pod", "Lease", "ServiceAccount", "Role", "RoleBinding", "Secret")
WINDOW_S = 10.0

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    """Every sample the operator serves on /metrics: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def requests(samples: Samples) -> dict[tuple[str, str], float]:
    """groupops_operator_api_requests_total by (verb, kind)."""
    return {
        (dict(labels)["verb"], dict(labels)["kind"]): value
        for (name, labels), value in samples.items()
        if name == "groupops_operator_api_requests_total"
    }


def moved(before: Samples, after: Samples) -> dict[tuple[str, str], float]:
    """Requests made between two scrapes, by (verb, kind)."""
    old, new = requests(before), requests(after)
    return {key: new[key] - old.get(key, 0.0) for key in new if new[key] != old.get(key, 0.0)}


def unexpected(window: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """What a steady state should not ask: anything but watches (opened again when the server
    ends one) and the leader election's renewals of its Lease (one PUT each)."""
    return {key: n for key, n in window.items() if key[0] != "watch" and key != ("update", "Lease")}


def reconciles(samples: Samples, namespace: str) -> float:
    key = ("groupops_reconcile_duration_seconds_count", (("namespace", namespace), ("policy", POLICY)))
    return samples.get(key, 0.0)


def manifest() -> dict[str, Any]:
    return {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "kafka": {"bootstrapServers": "127.0.0.1:9092", "authSecretRef": {"name": "quiet-auth"}},
            "groupId": POLICY,
            "topics": ["a"],
            "strategy": {"type": "balanced"},
            "lagSource": {"type": "static", "static": {"lags": {"a": [9, 8, 7, 6]}}},
            "consumers": {
                "replicas": 2,
                "template": {"spec": {"containers": [{"name": "consumer", "image": "c:1"}]}},
            },
        },
    }


def auth_secret() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "quiet-auth"},
        "stringData": {"security.protocol": "PLAINTEXT"},
    }


def test_a_settled_policy_makes_no_get_or_list_while_its_daemon_ticks(
    kubectl: Kubectl, namespace: str, module_operator: OperatorProcess
) -> None:
    kubectl.apply(auth_secret(), namespace)
    kubectl.apply(manifest(), namespace)
    wait_for("the policy to settle", settled(kubectl, namespace, POLICY), timeout=90)
    port = module_operator.metrics_port

    def quiet_for_a_tick() -> Samples | None:
        """Samples once two seconds of ticks went by with no request but watches and renewals
        (the first runs' last writes are done: pods, Leases, status)."""
        before = scrape(port)
        time.sleep(2.0)
        after = scrape(port)
        ticked = reconciles(after, namespace) > reconciles(before, namespace)
        return after if ticked and not unexpected(moved(before, after)) else None

    first = wait_for("the operator to go quiet", quiet_for_a_tick, timeout=60, interval=0)
    time.sleep(WINDOW_S)
    second = scrape(port)

    ticks = reconciles(second, namespace) - reconciles(first, namespace)
    assert ticks >= WINDOW_S / 2, f"the daemon reconciled only {ticks:.0f} times in {WINDOW_S:.0f} s"
    window = moved(first, second)
    reads = {key: n for key, n in window.items() if key[0] in ("get", "list") and key[1] in OWNED}
    assert not reads, f"GET/LIST of owned kinds in steady state: {reads}"
    assert not unexpected(window), f"requests other than watches and the leader's renewals: {window}"
    assert requests(first).get(("watch", "Secret"), 0.0) >= 1, "the auth Secret is watched"
    fallbacks = {
        labels: value - first.get((name, labels), 0.0)
        for (name, labels), value in second.items()
        if name == "groupops_operator_cache_fallbacks_total" and value != first.get((name, labels), 0.0)
    }
    assert not fallbacks, f"reads that went to the API: {fallbacks}"


def test_account_objects_changed_by_hand_on_a_settled_policy_are_restored(
    kubectl: Kubectl, namespace: str, module_operator: OperatorProcess
) -> None:
    """The runs of a settled policy skip the account apply while its account objects are as the
    last apply left them (design §8.3); a hand edit or delete is a change, and is undone."""
    kubectl.apply(auth_secret(), namespace)
    kubectl.apply(manifest(), namespace)
    wait_for("the policy to settle", settled(kubectl, namespace, POLICY), timeout=90)
    name = consumer_account_name(POLICY, 0)
    rendered = kubectl.get_json("role", name, namespace)["rules"]
    assert any(rule.get("resourceNames") for rule in rendered), rendered
    # Widen replica 0's Role to every Lease of the namespace, and unbind it.
    widened = [{"op": "remove", "path": f"/rules/{i}/resourceNames"} for i in range(len(rendered))]
    # The patch's own answer is what it wrote: a read after it may already see the restored Role.
    patched = kubectl.run(
        "patch", "role", name, "-n", namespace, "--type=json", "-p", json.dumps(widened), "-o", "json"
    )
    assert not any(rule.get("resourceNames") for rule in json.loads(patched.stdout)["rules"])
    kubectl.run("delete", "rolebinding", name, "-n", namespace)

    def restored() -> bool:
        role = kubectl.get_json("role", name, namespace)
        binding = kubectl.get_json("rolebinding", name, namespace)
        return role is not None and role["rules"] == rendered and binding is not None

    wait_for("the Role and RoleBinding to be restored", restored, timeout=30)
