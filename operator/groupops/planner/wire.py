"""What the operator publishes and the consumers read: names, the plan ConfigMap, the Lease notes.

Both sides of the handoff import this module (the controller to write, `groupops.consumer` to
read), so the format has one definition. Pure: dictionaries in, dictionaries out.

Plan ConfigMap `<policy>-plan`, `data`:
    epoch      "7"                      monotonic; a consumer ignores a plan older than its last
    strategy   "lag"
    <identity> '[["orders",0],["orders",3]]'   one entry per identity, possibly '[]'
Identities are `<groupId>-<ordinal>` (the consumer's group.instance.id); they always end in
`-<digits>`, so they never collide with `epoch` or `strategy`.

Lease `<policy>-<identity>` (made DNS-safe by `lease_name`), written by the consumer:
    spec.holderIdentity, spec.renewTime, spec.leaseDurationSeconds   as leader election does
    annotations groupops.dev/epoch       the last plan epoch it applied
                groupops.dev/partitions  JSON [[topic, partition], ...] it owns now
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from groupops.model import MemberId, Plan, TopicPartition

__all__ = [
    "EPOCH_KEY",
    "LEASE_EPOCH_ANNOTATION",
    "LEASE_PARTITIONS_ANNOTATION",
    "STRATEGY_KEY",
    "LeaseNote",
    "PlanFormatError",
    "decode_lease_note",
    "decode_partitions",
    "decode_plan",
    "dns_name",
    "encode_partitions",
    "encode_plan",
    "identity_name",
    "identity_ordinal",
    "lease_name",
    "plan_configmap_name",
]

EPOCH_KEY = "epoch"
STRATEGY_KEY = "strategy"
LEASE_EPOCH_ANNOTATION = "groupops.dev/epoch"
LEASE_PARTITIONS_ANNOTATION = "groupops.dev/partitions"

_DNS_LABEL_MAX = 63
_DNS_SUBDOMAIN_MAX = 253
_NOT_DNS = re.compile(r"[^a-z0-9.-]+")
_IDENTITY = re.compile(r"^(?P<group>.+)-(?P<ordinal>0|[1-9][0-9]*)$")


class PlanFormatError(ValueError):
    """A plan ConfigMap or Lease note that does not follow this module's format. `key` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{message} ({key})")
        self.key = key


def identity_name(group_id: str, ordinal: int) -> str:
    """The group.instance.id of replica `ordinal`: `<groupId>-<ordinal>`."""
    return f"{group_id}-{ordinal}"


def identity_ordinal(group_id: str, identity: str) -> int | None:
    """The ordinal of `identity` if it is one of `group_id`'s identities, else None."""
    match = _IDENTITY.match(identity)
    if match is None or match["group"] != group_id:
        return None
    return int(match["ordinal"])


def dns_name(text: str, *, limit: int = _DNS_SUBDOMAIN_MAX) -> str:
    """`text` as a DNS-1123 subdomain: lower case, other characters as '-'. When anything had to
    change (or the name is too long) a short hash of the original is appended, so two different
    group ids never map to one name."""
    cleaned = _NOT_DNS.sub("-", text.lower()).strip(".-") or "x"
    if cleaned == text and len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{cleaned[: limit - 9].rstrip('.-')}-{digest}"


def plan_configmap_name(policy: str) -> str:
    return f"{policy}-plan"


def lease_name(policy: str, identity: str) -> str:
    """`<policy>-<identity>`, made a valid object name (group ids may hold '_' or capitals)."""
    return dns_name(f"{policy}-{identity}")


def encode_partitions(partitions: Iterable[TopicPartition]) -> str:
    return json.dumps([[tp.topic, tp.partition] for tp in sorted(partitions)], separators=(",", ":"))


def decode_partitions(text: str, *, key: str) -> tuple[TopicPartition, ...]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanFormatError(key, f"not JSON: {e.msg}") from e
    if not isinstance(raw, list):
        raise PlanFormatError(key, "expected a list of [topic, partition]")
    result: list[TopicPartition] = []
    for item in raw:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not isinstance(item[0], str)
            or not isinstance(item[1], int)
            or isinstance(item[1], bool)
            or item[1] < 0
        ):
            raise PlanFormatError(key, f"expected [topic, partition], got {item!r}")
        result.append(TopicPartition(item[0], item[1]))
    return tuple(sorted(result))


def encode_plan(plan: Plan) -> dict[str, str]:
    """The ConfigMap `data` of `plan`: epoch, strategy and one entry per identity."""
    data = {EPOCH_KEY: str(plan.epoch), STRATEGY_KEY: plan.strategy}
    for identity, partitions in sorted(plan.assignment.items()):
        data[identity] = encode_partitions(partitions)
    return data


def decode_plan(data: Mapping[str, str]) -> Plan:
    """The inverse of `encode_plan`; raises PlanFormatError naming the bad key."""
    raw_epoch = data.get(EPOCH_KEY)
    if raw_epoch is None or not raw_epoch.isdigit():
        raise PlanFormatError(EPOCH_KEY, f"expected a non-negative integer, got {raw_epoch!r}")
    assignment = {
        MemberId(key): decode_partitions(value, key=key)
        for key, value in data.items()
        if key not in (EPOCH_KEY, STRATEGY_KEY)
    }
    return Plan(epoch=int(raw_epoch), strategy=data.get(STRATEGY_KEY, ""), assignment=assignment)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseNote:
    """What a consumer reports on its Lease: the epoch it applied and the partitions it owns."""

    epoch: int | None
    partitions: tuple[TopicPartition, ...]


def decode_lease_note(annotations: Mapping[str, str]) -> LeaseNote:
    raw_epoch = annotations.get(LEASE_EPOCH_ANNOTATION)
    epoch = int(raw_epoch) if raw_epoch is not None and raw_epoch.isdigit() else None
    raw_partitions = annotations.get(LEASE_PARTITIONS_ANNOTATION)
    partitions = (
        () if raw_partitions is None else decode_partitions(raw_partitions, key=LEASE_PARTITIONS_ANNOTATION)
    )
    return LeaseNote(epoch=epoch, partitions=partitions)
