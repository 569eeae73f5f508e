"""The chart's RBAC is least privilege: the operator may make exactly the requests its code makes,
reads only the Secrets listed in kafkaAuthSecrets, each in its own namespace, and in scope
namespaced acts only in the namespaces it watches; people get view/edit/admin roles on policies
through Kubernetes' aggregation."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.chart_support import NAMESPACE, Access, Chart, find, may, named, rules_of

ALL = ("get", "list", "watch", "create", "update", "patch", "delete")
VERBS = (*ALL, "deletecollection", "escalate", "bind", "impersonate")

# What the operator's code sends in a namespace it watches (templates/rbac.yaml names the code).
OPERATOR_IN_A_WATCHED_NAMESPACE: dict[tuple[str, str], frozenset[str]] = {
    ("groupops.dev", "consumergrouppolicies"): frozenset({"get", "list", "watch", "patch"}),
    ("groupops.dev", "consumergrouppolicies/status"): frozenset({"patch"}),
    ("groupops.dev", "consumergrouppolicies/finalizers"): frozenset({"update"}),
    ("", "pods"): frozenset({"get", "list", "watch", "create", "patch", "delete"}),
    ("", "configmaps"): frozenset(ALL),
    ("", "serviceaccounts"): frozenset(ALL),
    ("rbac.authorization.k8s.io", "roles"): frozenset(ALL),
    ("rbac.authorization.k8s.io", "rolebindings"): frozenset(ALL),
    ("coordination.k8s.io", "leases"): frozenset(ALL),
    ("", "events"): frozenset({"create"}),
}
KINDS_ASKED_ABOUT = (
    *OPERATOR_IN_A_WATCHED_NAMESPACE,
    ("", "secrets"),
    ("events.k8s.io", "events"),
    ("apps", "deployments"),
    ("", "services"),
    ("", "pods/exec"),
    ("", "serviceaccounts/token"),
)

# What render_rbac.render_role grants the consumers (docs/design.md §7.1): RBAC lets the operator
# write a Role only with rights it holds itself (it has no `escalate`).
CONSUMER_ROLE = {("", "configmaps"): {"get", "watch"}, ("coordination.k8s.io", "leases"): {"get", "update"}}

AUTH_SECRETS = [
    {"namespace": "team-a", "name": "kafka-auth"},
    {"namespace": "team-a", "name": "kafka-scram"},
    {"namespace": "team-b", "name": "kafka-auth"},
]


def granted(docs: list[dict[str, Any]], namespace: str | None) -> dict[tuple[str, str], frozenset[str]]:
    """Every (group, resource) of KINDS_ASKED_ABOUT the operator may act on in `namespace`
    without naming an object, with the verbs it may use."""
    out = {}
    for group, resource in KINDS_ASKED_ABOUT:
        verbs = frozenset(v for v in VERBS if may(docs, Access(v, group, resource, namespace)))
        if verbs:
            out[(group, resource)] = verbs
    return out


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({}, id="defaults"),
        pytest.param({"scope": "cluster"}, id="cluster-scope"),
        pytest.param({"scope": "cluster", "kafkaAuthSecrets": AUTH_SECRETS}, id="cluster-scope-auth-secrets"),
        pytest.param(
            {
                "scope": "namespaced",
                "watchNamespaces": ["team-a", "team-b"],
                "kafkaAuthSecrets": AUTH_SECRETS,
            },
            id="namespaced-auth-secrets",
        ),
    ],
)
def test_no_rule_anywhere_grants_secrets_without_naming_them(chart: Chart, values: dict[str, Any]) -> None:
    docs = chart.render(values)
    for kind, name, rule in rules_of(docs):
        touches_secrets = {"secrets", "*"} & set(rule.get("resources") or []) and {"", "*"} & set(
            rule.get("apiGroups") or []
        )
        if touches_secrets:
            assert rule.get("resourceNames"), f"{kind} {name} grants Secrets without resourceNames: {rule}"
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, f"{kind} {name} writes Secrets: {rule}"


@pytest.mark.parametrize("scope", ["cluster", "namespaced"])
def test_each_auth_secret_is_readable_in_its_namespace_only(chart: Chart, scope: str) -> None:
    docs = chart.render(
        {"scope": scope, "watchNamespaces": ["team-a", "team-b"], "kafkaAuthSecrets": AUTH_SECRETS}
    )
    listed = {(s["namespace"], s["name"]) for s in AUTH_SECRETS}
    namespaces = ("team-a", "team-b", "team-c", NAMESPACE)
    names = ("kafka-auth", "kafka-scram", "other")
    for namespace in namespaces:
        for name in names:
            for verb in ("get", "list", "watch"):
                expected = (namespace, name) in listed
                assert may(docs, Access(verb, "", "secrets", namespace, name)) is expected, (
                    f"{verb} Secret {namespace}/{name}: expected {'allowed' if expected else 'denied'}"
                )
            for verb in ("create", "update", "patch", "delete"):
                assert not may(docs, Access(verb, "", "secrets", namespace, name))
        # a list or watch without fieldSelector metadata.name reads every Secret: never allowed
        assert not may(docs, Access("list", "", "secrets", namespace))
        assert not may(docs, Access("watch", "", "secrets", namespace))
    roles = [r for r in named(docs, "Role") if r["metadata"]["name"] == "groupops-kafka-auth"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]


@pytest.mark.parametrize("scope", ["cluster", "namespaced"])
def test_without_auth_secrets_no_secret_is_readable(chart: Chart, scope: str) -> None:
    docs = chart.render({"scope": scope})
    assert not any("secrets" in (rule.get("resources") or []) for _, _, rule in rules_of(docs))
    assert not may(docs, Access("get", "", "secrets", "team-a", "kafka-auth"))


def test_an_auth_secret_in_a_namespace_not_watched_is_refused(chart: Chart) -> None:
    error = chart.refusal(
        {
            "scope": "namespaced",
            "watchNamespaces": ["team-a"],
            "kafkaAuthSecrets": [{"namespace": "team-b", "name": "kafka-auth"}],
        }
    )
    assert 'kafkaAuthSecrets[0].namespace "team-b" is not watched' in error


def test_cluster_scope_grants_exactly_what_the_operator_uses_in_every_namespace(chart: Chart) -> None:
    docs = chart.render({"scope": "cluster"})
    for namespace in ("team-a", "anywhere"):
        assert granted(docs, namespace) == OPERATOR_IN_A_WATCHED_NAMESPACE
    assert granted(docs, NAMESPACE) == OPERATOR_IN_A_WATCHED_NAMESPACE
    crds = ("apiextensions.k8s.io", "customresourcedefinitions")
    assert {v for v in VERBS if may(docs, Access(v, *crds, None))} == {"list", "watch"}
    assert not may(docs, Access("list", "", "namespaces", None)), "kopf lists namespaces only when namespaced"


def test_namespaced_scope_acts_only_in_the_watched_namespaces(chart: Chart) -> None:
    docs = chart.render({"scope": "namespaced", "watchNamespaces": ["team-a", "team-b"]})
    assert granted(docs, "team-a") == OPERATOR_IN_A_WATCHED_NAMESPACE
    assert granted(docs, "team-b") == OPERATOR_IN_A_WATCHED_NAMESPACE
    assert granted(docs, "team-c") == {}
    # the release namespace: the election Lease only (create, and get/list/watch/update by name:
    # a standby watches it with fieldSelector metadata.name)
    assert granted(docs, NAMESPACE) == {("coordination.k8s.io", "leases"): frozenset({"create"})}
    for verb in ("get", "list", "watch", "update"):
        assert may(docs, Access(verb, "coordination.k8s.io", "leases", NAMESPACE, "groupops-operator"))
    for verb in ("update", "watch"):
        assert not may(docs, Access(verb, "coordination.k8s.io", "leases", NAMESPACE, "other"))
    # cluster-wide: only what kopf's observers read
    for group, resource in [("apiextensions.k8s.io", "customresourcedefinitions"), ("", "namespaces")]:
        assert {v for v in VERBS if may(docs, Access(v, group, resource, None))} == {"list", "watch"}
    for role in named(docs, "ClusterRole"):
        for rule in role["rules"]:
            assert (
                set(rule["verbs"]) <= {"get", "list", "watch"}
                or role["metadata"]["name"].endswith(("-edit", "-admin"))
                or rule["resources"] == ["consumergroupclusters/status"]
            ), f"ClusterRole {role['metadata']['name']} writes in scope namespaced: {rule}"
    bound = {b["roleRef"]["name"] for b in named(docs, "ClusterRoleBinding")}
    assert bound == {"groupops-discovery", "groupops-clusters"}


@pytest.mark.parametrize("scope", ["cluster", "namespaced"])
def test_clusters_are_read_and_only_their_status_is_written(chart: Chart, scope: str) -> None:
    docs = chart.render({"scope": scope})
    clusters = ("groupops.dev", "consumergroupclusters")
    assert {v for v in VERBS if may(docs, Access(v, *clusters, None, "prod"))} == {"get", "list", "watch"}
    status = ("groupops.dev", "consumergroupclusters/status")
    assert {v for v in VERBS if may(docs, Access(v, *status, None, "prod"))} == {"patch"}


def test_by_default_the_operator_acts_only_in_the_release_namespace(chart: Chart) -> None:
    docs = chart.render({})
    assert granted(docs, NAMESPACE) == OPERATOR_IN_A_WATCHED_NAMESPACE
    assert granted(docs, "team-a") == {}
    assert {b["roleRef"]["name"] for b in named(docs, "ClusterRoleBinding")} == {
        "groupops-discovery",
        "groupops-clusters",
    }
    assert granted(docs, "team-a") == {}
    args = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--namespace={NAMESPACE}" in args


@pytest.mark.parametrize("scope", ["cluster", "namespaced"])
def test_the_operator_holds_every_right_it_grants_consumers(chart: Chart, scope: str) -> None:
    docs = chart.render({"scope": scope, "watchNamespaces": ["team-a"]})
    for (group, resource), verbs in CONSUMER_ROLE.items():
        for verb in verbs:
            assert may(docs, Access(verb, group, resource, "team-a", "orders-plan")), (verb, resource)


def test_people_get_view_edit_and_admin_roles_through_aggregation(chart: Chart) -> None:
    docs = chart.render({})
    expected = {
        "view": ["get", "list", "watch"],
        "edit": ["get", "list", "watch", "create", "update", "patch", "delete"],
        "admin": ["get", "list", "watch", "create", "update", "patch", "delete"],
    }
    for role, verbs in expected.items():
        cluster_role = find(docs, "ClusterRole", f"groupops-{role}")
        assert cluster_role["metadata"]["labels"][f"rbac.authorization.k8s.io/aggregate-to-{role}"] == "true"
        assert cluster_role["rules"] == [
            {"apiGroups": ["groupops.dev"], "resources": ["consumergrouppolicies"], "verbs": verbs}
        ], "no user role writes status: it is the operator's"
    without = chart.render({"rbac": {"createUserRoles": False}})
    assert not any(
        key.startswith("rbac.authorization.k8s.io/aggregate-to")
        for doc in without
        for key in (doc["metadata"].get("labels") or {})
    )


def test_every_binding_names_the_operator_account_and_an_existing_role(chart: Chart) -> None:
    values = {
        "scope": "namespaced",
        "watchNamespaces": ["team-a"],
        "kafkaAuthSecrets": [{"namespace": "team-a", "name": "kafka-auth"}],
        "serviceAccount": {"name": "ops-operator"},
    }
    docs = chart.render(values)
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs}
    for binding in named(docs, "RoleBinding") + named(docs, "ClusterRoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "ops-operator", "namespace": NAMESPACE}
        ]
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        assert (ref["kind"], namespace, ref["name"]) in roles
    assert find(docs, "ServiceAccount")["metadata"]["name"] == "ops-operator"
    assert may(docs, Access("get", "", "secrets", "team-a", "kafka-auth"), account="ops-operator")
