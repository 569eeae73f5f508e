"""Names and labels of everything a policy owns, in one place (render, observe and delete agree).

Per policy `<p>` with group `<g>`: ServiceAccount, Role and RoleBinding `<p>-consumer`; plan
ConfigMap `<p>-plan`; pod `<p>-<ordinal>` running identity `<g>-<ordinal>`; Lease
`<p>-<identity>` (DNS-safe). Every object carries the labels of `owned_labels`.
"""

from __future__ import annotations

from groupops.planner.wire import dns_name, identity_name, lease_name, plan_configmap_name

__all__ = [
    "ANNOTATION_GENERATION",
    "ANNOTATION_IDENTITY",
    "ANNOTATION_MEMBERS",
    "ANNOTATION_RESET_OFFSETS",
    "API_GROUP",
    "API_VERSION",
    "KIND",
    "LABEL_MANAGED_BY",
    "LABEL_ORDINAL",
    "LABEL_POLICY",
    "LABEL_TEMPLATE_HASH",
    "LABEL_ZONE",
    "PLURAL",
    "consumer_account_name",
    "identity_name",
    "lease_name",
    "owned_labels",
    "owned_selector",
    "plan_configmap_name",
    "pod_name",
    "shared_account_name",
]

API_GROUP = "groupops.dev"
API_VERSION = "v1alpha1"
KIND = "ConsumerGroupPolicy"
PLURAL = "consumergrouppolicies"

LABEL_POLICY = "groupops.dev/policy"
LABEL_ORDINAL = "groupops.dev/ordinal"
LABEL_TEMPLATE_HASH = "groupops.dev/template-hash"
LABEL_ZONE = "groupops.dev/zone"
"""The zone a pod was placed in (its slot's, with consumers.zones): a pod whose slot's zone
changed is replaced as a stale template is (controller/identities.py)."""
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "groupops"

ANNOTATION_RESET_OFFSETS = "groupops.dev/reset-offsets"
"""A `groupops reset-offsets` request (controller/offset_reset.py); its outcome is in
status.offsetReset."""
ANNOTATION_MEMBERS = "groupops.dev/members"
ANNOTATION_IDENTITY = "groupops.dev/identity"  # an annotation: group ids can exceed a label's 63 characters
ANNOTATION_GENERATION = "groupops.dev/policy-generation"


def consumer_account_name(policy: str, ordinal: int) -> str:
    """The ServiceAccount (and its Role and RoleBinding) of one replica: what it may do is its own
    (docs/design.md §13.3)."""
    return dns_name(f"{policy}-consumer-{ordinal}")


def shared_account_name(policy: str) -> str:
    """The one account all replicas of a policy shared before 0.2 (removed once no pod uses it)."""
    return dns_name(f"{policy}-consumer")


def pod_name(policy: str, ordinal: int) -> str:
    return f"{policy}-{ordinal}"


def owned_labels(policy: str) -> dict[str, str]:
    return {LABEL_POLICY: policy, LABEL_MANAGED_BY: MANAGED_BY}


def owned_selector(policy: str) -> str:
    """Selects by the policy label alone: a consumer rewriting its Lease keeps that label (the
    handoff's format requires it) but need not keep the others."""
    return f"{LABEL_POLICY}={policy}"
