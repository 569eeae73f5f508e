"""The handoff's records: the published plan with its pending releases, and the consumer's Lease.

Stage: shared by the operator's publish step (writes the plan ConfigMap, reads and fences Leases)
and the consumer runtime (reads the plan, writes its Lease). Builds on `groupops.planner.wire`,
which owns the names and the ConfigMap `data` encoding; this module adds what the two-epoch
handoff needs and renders whole objects. Pure: dictionaries in, dictionaries out.

Plan ConfigMap `<policy>-plan` (`plan_to_configmap` / `plan_from_configmap`):
    data                             wire.encode_plan: epoch, strategy, one entry per identity
    annotations groupops.dev/releasing
        JSON [[topic, partition, identity, epoch, since], ...]: partitions that left `identity`'s
        set in plan `epoch` (published at wall-clock `since`) and that enter no set until that
        identity acknowledged `epoch` or its holdings were voided (see `handoff`).
        Beyond RELEASING_LEGACY_LIMIT_BYTES the compact form: the distinct (identity, epoch,
        since) once each in "g", and per topic, per group index, the partitions as runs of
        `wire`'s compact form (a topic name once per topic, not once per release or group):
        {"v":2,"g":[["g-1",7,12.5],["g-2",7,12.5]],"t":{"orders":[[0,[0,[3,7]]],[1,[9]]]}}
    annotations groupops.dev/barrier
        E, on a resync plan only: no partition enters any set until every identity that may hold
        something acknowledged E or was voided (see `handoff`, "resync"). Absent otherwise.
    labels      groupops.dev/policy  <policy>

Lease `<policy>-<identity>` (`render_lease` / `lease_record`), renewed by the consumer:
    spec.holderIdentity                <identity>; removed when the consumer releases on exit
    spec.leaseDurationSeconds, renewTime, acquireTime, leaseTransitions   as leader election
    annotations groupops.dev/epoch            last plan epoch applied and acknowledged
                groupops.dev/partitions       JSON [[topic, partition], ...] owned now
                groupops.dev/state            starting | active | released
                groupops.dev/released-through E: whatever the holder owned under plans <= E is
                                              void (it released everything on exit, or the
                                              operator fenced it); it applies only plans > E
                groupops.dev/incarnation      the holding process (a uuid), so a restarted
                                              replica never shares the Lease with a zombie
                groupops.dev/identity         the identity unmangled (the name is DNS-safe)
                groupops.dev/liveness         `heartbeat`: the holder proves it is alive with
                                              heartbeats to the operator instead of renewals
                                              (docs/design.md §7.5); only the operator's fence
                                              lets another process take the Lease
                groupops.dev/fenced-incarnation  written by the operator's fence: the
                                              incarnation it judged dead; removed by that
                                              incarnation's next write
    labels      groupops.dev/policy  <policy>

The operator creates each Lease unheld (the consumer's Role may only get and update it); the
consumer takes it. The operator fences an identity it judged expired by merging
`fence_annotations(epoch)` into its Lease with the resourceVersion it last saw (compare-and-
swap): if the consumer renewed in between, the write conflicts and the identity is alive after
all. A consumer that sees the fence drops everything and applies only plans newer than `epoch`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypedDict

from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.wire import (
    COMPACT_VERSION,
    LEASE_EPOCH_ANNOTATION,
    LEASE_PARTITIONS_ANNOTATION,
    MAX_DECODED_PARTITIONS,
    PlanFormatError,
    decode_partitions,
    decode_plan,
    encode_partitions,
    encode_plan,
    lease_name,
    parse_json,
    partitions_from_runs,
    plan_configmap_name,
    topic_runs,
)

__all__ = [
    "BARRIER_ANNOTATION",
    "HEARTBEAT_LIVENESS",
    "LEASE_ERRORS_ANNOTATION",
    "LEASE_FENCED_INCARNATION_ANNOTATION",
    "LEASE_IDENTITY_ANNOTATION",
    "LEASE_INCARNATION_ANNOTATION",
    "LEASE_LIVENESS_ANNOTATION",
    "LEASE_RELEASED_THROUGH_ANNOTATION",
    "LEASE_STATE_ANNOTATION",
    "LEASE_STOPPED_ANNOTATION",
    "POLICY_LABEL",
    "RELEASING_ANNOTATION",
    "RELEASING_LEGACY_LIMIT_BYTES",
    "ConfigMapParts",
    "LeaseRecord",
    "LeaseState",
    "PlanFormatError",
    "PublishedPlan",
    "Release",
    "empty_plan",
    "fence_annotations",
    "format_micro_time",
    "lease_record",
    "lease_record_annotations",
    "parse_micro_time",
    "parse_rfc3339_ms",
    "plan_from_configmap",
    "plan_to_configmap",
    "render_lease",
    "render_plan_configmap",
]

RELEASING_ANNOTATION = "groupops.dev/releasing"
RELEASING_LEGACY_LIMIT_BYTES = 128 * 1024
"""The releasing annotation keeps the legacy form (what earlier versions wrote and read) while it
is at most this long: half of the 256 KiB that all of an object's annotations share, about 2,500
pending releases. Beyond, the compact form, about 5-10 bytes a partition instead of 50. Consumers
of the previous version read this annotation during an upgrade, hence legacy while it is small."""
BARRIER_ANNOTATION = "groupops.dev/barrier"
LEASE_STATE_ANNOTATION = "groupops.dev/state"
LEASE_RELEASED_THROUGH_ANNOTATION = "groupops.dev/released-through"
LEASE_INCARNATION_ANNOTATION = "groupops.dev/incarnation"
LEASE_IDENTITY_ANNOTATION = "groupops.dev/identity"
LEASE_LIVENESS_ANNOTATION = "groupops.dev/liveness"
LEASE_FENCED_INCARNATION_ANNOTATION = "groupops.dev/fenced-incarnation"
LEASE_ERRORS_ANNOTATION = "groupops.dev/errors"
"""What the replica counted since it started (design §9.2, §9.1): JSON {"skipped": n,
"deadLettered": n, "uncommittedReleases": n}, zero counts left out; absent when all are zero."""
LEASE_STOPPED_ANNOTATION = "groupops.dev/stopped"
"""Partitions the replica stopped on a message its callback keeps failing on (design §9.2):
JSON `[[topic, partition, offset], ...]`; absent when none."""
HEARTBEAT_LIVENESS = "heartbeat"
POLICY_LABEL = "groupops.dev/policy"


@dataclass(frozen=True, slots=True, kw_only=True)
class Release:
    """A partition on its way out of `identity`'s set: it left in plan `epoch`, published at
    wall-clock `since` (seconds; for the handoff-duration metric only, never for safety)."""

    identity: MemberId
    epoch: int
    since: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishedPlan:
    """A plan as published: what every identity owns at `plan.epoch`, plus the partitions still
    being released (in nobody's set, waiting for their last owner).

    `barrier`: set on a resync plan (its own epoch): nothing is granted until every identity that
    may hold something has acknowledged it. `lost`: not a published plan but the stand-in for one
    that could not be read (ConfigMap deleted or unreadable); never written, always resynced."""

    plan: Plan
    releasing: Mapping[TopicPartition, Release] = field(default_factory=dict)
    barrier: int | None = None
    lost: bool = False

    @property
    def epoch(self) -> int:
        return self.plan.epoch

    def owner_of(self) -> dict[TopicPartition, MemberId]:
        return {tp: identity for identity, tps in self.plan.assignment.items() for tp in tps}


def empty_plan(strategy: str = "") -> PublishedPlan:
    """The plan before the first publication: epoch 0, nobody owns anything."""
    return PublishedPlan(plan=Plan(epoch=0, strategy=strategy, assignment={}))


class ConfigMapParts(TypedDict):
    """The parts of the plan ConfigMap this module owns."""

    data: dict[str, str]
    annotations: dict[str, str]


def plan_to_configmap(published: PublishedPlan) -> ConfigMapParts:
    """`data` (wire format) and annotations (pending releases) of the plan ConfigMap."""
    annotations = {RELEASING_ANNOTATION: _encode_releasing(published.releasing)}
    if published.barrier is not None:
        annotations[BARRIER_ANNOTATION] = str(published.barrier)
    return {"data": encode_plan(published.plan), "annotations": annotations}


def _encode_releasing(releasing: Mapping[TopicPartition, Release]) -> str:
    # A legacy entry is at least `["",0,"",0,0],` (15 bytes): a large map skips the legacy text.
    if 15 * len(releasing) + 1 <= RELEASING_LEGACY_LIMIT_BYTES:
        legacy = json.dumps(
            [
                [tp.topic, tp.partition, release.identity, release.epoch, round(release.since, 3)]
                for tp, release in sorted(releasing.items())
            ],
            separators=(",", ":"),
        )
        if len(legacy) <= RELEASING_LEGACY_LIMIT_BYTES:
            return legacy
    groups = sorted({(r.identity, r.epoch, round(r.since, 3)) for r in releasing.values()})
    index = {group: i for i, group in enumerate(groups)}
    by_topic: dict[str, dict[int, list[TopicPartition]]] = {}
    for tp, r in sorted(releasing.items()):
        by_topic.setdefault(tp.topic, {}).setdefault(
            index[r.identity, r.epoch, round(r.since, 3)], []
        ).append(tp)
    compact = {
        "v": COMPACT_VERSION,
        "g": [list(group) for group in groups],
        "t": {
            topic: [[i, topic_runs(tps)[topic]] for i, tps in sorted(per_group.items())]
            for topic, per_group in by_topic.items()
        },
    }
    return json.dumps(compact, separators=(",", ":"))


def plan_from_configmap(data: Mapping[str, str], annotations: Mapping[str, str] | None) -> PublishedPlan:
    """The inverse of `plan_to_configmap`; raises PlanFormatError naming the bad key. A ConfigMap
    without the releasing annotation has nothing pending."""
    plan = decode_plan(data)
    raw = (annotations or {}).get(RELEASING_ANNOTATION)
    raw_barrier = (annotations or {}).get(BARRIER_ANNOTATION)
    barrier = None
    if raw_barrier is not None:
        if not raw_barrier.isdigit():
            raise PlanFormatError(BARRIER_ANNOTATION, f"expected an epoch, got {raw_barrier!r}")
        barrier = int(raw_barrier)
    return PublishedPlan(plan=plan, releasing={} if raw is None else _decode_releasing(raw), barrier=barrier)


def _decode_releasing(text: str) -> dict[TopicPartition, Release]:
    raw = parse_json(text, key=RELEASING_ANNOTATION)
    if isinstance(raw, dict):
        return _decode_compact_releasing(raw)
    if not isinstance(raw, list):
        raise PlanFormatError(RELEASING_ANNOTATION, "expected a list")
    result: dict[TopicPartition, Release] = {}
    for item in raw:
        if not (
            isinstance(item, list)
            and len(item) == 5
            and isinstance(item[0], str)
            and _is_count(item[1])
            and isinstance(item[2], str)
            and _is_count(item[3])
            and isinstance(item[4], int | float)
        ):
            raise PlanFormatError(
                RELEASING_ANNOTATION, f"expected [topic, partition, identity, epoch, since], got {item!r}"
            )
        result[TopicPartition(item[0], item[1])] = Release(
            identity=MemberId(item[2]), epoch=item[3], since=float(item[4])
        )
    return result


def _decode_compact_releasing(raw: dict[str, Any]) -> dict[TopicPartition, Release]:
    """{"v":2,"g":[[identity, epoch, since], ...],"t":{topic: [[group, runs], ...]}}, strict like
    `wire`'s compact form: group indexes ascend within a topic, and a partition is pending once."""
    key = RELEASING_ANNOTATION
    if set(raw) != {"v", "g", "t"}:
        raise PlanFormatError(key, f'expected the keys "v", "g" and "t", got {sorted(raw)}')
    if raw["v"] != COMPACT_VERSION or isinstance(raw["v"], bool):
        raise PlanFormatError(
            key, f"compact form version {raw['v']!r} is not {COMPACT_VERSION}: written by a newer groupops?"
        )
    if not isinstance(raw["g"], list) or not isinstance(raw["t"], dict):
        raise PlanFormatError(key, 'expected "g" a list of [identity, epoch, since] and "t" an object')
    releases: list[Release] = []
    for group in raw["g"]:
        if not (
            isinstance(group, list)
            and len(group) == 3
            and isinstance(group[0], str)
            and _is_count(group[1])
            and isinstance(group[2], int | float)
            and not isinstance(group[2], bool)
        ):
            raise PlanFormatError(key, f"expected [identity, epoch, since], got {group!r:.80}")
        releases.append(Release(identity=MemberId(group[0]), epoch=group[1], since=float(group[2])))
    result: dict[TopicPartition, Release] = {}
    for topic, pairs in sorted(raw["t"].items()):
        if not isinstance(pairs, list) or not pairs:
            raise PlanFormatError(key, f"topic {topic!r}: expected a non-empty list of [group, partitions]")
        previous = -1
        for pair in pairs:
            if not (
                isinstance(pair, list) and len(pair) == 2 and _is_count(pair[0]) and pair[0] < len(releases)
            ):
                raise PlanFormatError(
                    key,
                    f"topic {topic!r}: expected [group < {len(releases)}, partitions], got {pair!r:.80}",
                )
            if pair[0] <= previous:
                raise PlanFormatError(key, f"topic {topic!r}: group {pair[0]} repeated or out of order")
            previous = pair[0]
            budget = MAX_DECODED_PARTITIONS - len(result)
            for tp in partitions_from_runs({topic: pair[1]}, key=key, budget=budget):
                if tp in result:
                    raise PlanFormatError(key, f"{tp} is pending release twice")
                result[tp] = releases[pair[0]]
    return result


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def render_plan_configmap(namespace: str, policy: str, published: PublishedPlan) -> dict[str, Any]:
    """The whole ConfigMap object (no resourceVersion: the writer adds the one it read)."""
    parts = plan_to_configmap(published)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": plan_configmap_name(policy),
            "namespace": namespace,
            "labels": {POLICY_LABEL: policy},
            "annotations": parts["annotations"],
        },
        "data": parts["data"],
    }


class LeaseState(StrEnum):
    """What the holder of a Lease is doing. `released`: it exited after releasing everything."""

    STARTING = "starting"
    ACTIVE = "active"
    RELEASED = "released"


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRecord:
    """The handoff's reading of one consumer Lease (see the module docstring for each field)."""

    acked_epoch: int | None = None
    partitions: tuple[TopicPartition, ...] = ()
    state: LeaseState | None = None
    released_through: int | None = None
    incarnation: str | None = None
    heartbeats: bool = False
    """The holder sends heartbeats (`groupops.dev/liveness: heartbeat`)."""
    fenced_incarnation: str | None = None
    stopped: tuple[tuple[TopicPartition, int], ...] = ()
    """Partitions stopped on a failing message, each with that message's offset."""
    errors: tuple[tuple[str, int], ...] = ()
    """The replica's counts of skipped and dead-lettered messages and uncommitted releases."""


def lease_record_annotations(record: LeaseRecord, identity: str) -> dict[str, str]:
    annotations = {
        LEASE_IDENTITY_ANNOTATION: identity,
        LEASE_PARTITIONS_ANNOTATION: encode_partitions(record.partitions),
    }
    if record.acked_epoch is not None:
        annotations[LEASE_EPOCH_ANNOTATION] = str(record.acked_epoch)
    if record.state is not None:
        annotations[LEASE_STATE_ANNOTATION] = record.state.value
    if record.released_through is not None:
        annotations[LEASE_RELEASED_THROUGH_ANNOTATION] = str(record.released_through)
    if record.incarnation is not None:
        annotations[LEASE_INCARNATION_ANNOTATION] = record.incarnation
    if record.heartbeats:
        annotations[LEASE_LIVENESS_ANNOTATION] = HEARTBEAT_LIVENESS
    if record.errors:
        annotations[LEASE_ERRORS_ANNOTATION] = json.dumps(dict(record.errors), separators=(",", ":"))
    if record.stopped:
        annotations[LEASE_STOPPED_ANNOTATION] = json.dumps(
            [[tp.topic, tp.partition, offset] for tp, offset in sorted(record.stopped)], separators=(",", ":")
        )
    return annotations


_LEASE_STATES = {state.value: state for state in LeaseState}
"""Iterating an Enum is slow, and every run reads every replica's Lease."""


def lease_record(annotations: Mapping[str, str] | None) -> LeaseRecord:
    """Read a Lease's annotations. Unknown or malformed numbers read as absent (a Lease someone
    edited by hand must not crash the operator); malformed partitions raise PlanFormatError."""
    notes = annotations or {}
    raw_partitions = notes.get(LEASE_PARTITIONS_ANNOTATION)
    partitions = (
        () if raw_partitions is None else decode_partitions(raw_partitions, key=LEASE_PARTITIONS_ANNOTATION)
    )
    raw_state = notes.get(LEASE_STATE_ANNOTATION)
    state = _LEASE_STATES.get(raw_state) if raw_state is not None else None
    return LeaseRecord(
        acked_epoch=_count_or_none(notes.get(LEASE_EPOCH_ANNOTATION)),
        partitions=partitions,
        state=state,
        released_through=_count_or_none(notes.get(LEASE_RELEASED_THROUGH_ANNOTATION)),
        incarnation=notes.get(LEASE_INCARNATION_ANNOTATION),
        heartbeats=notes.get(LEASE_LIVENESS_ANNOTATION) == HEARTBEAT_LIVENESS,
        fenced_incarnation=notes.get(LEASE_FENCED_INCARNATION_ANNOTATION),
        stopped=_stopped(notes.get(LEASE_STOPPED_ANNOTATION)),
        errors=_errors(notes.get(LEASE_ERRORS_ANNOTATION)),
    )


def _errors(text: str | None) -> tuple[tuple[str, int], ...]:
    """The errors note; malformed reads as none (a report, never used for safety)."""
    try:
        raw = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return ()
    if not isinstance(raw, dict):
        return ()
    return tuple(
        sorted(
            (str(k), v) for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0
        )
    )


def _stopped(text: str | None) -> tuple[tuple[TopicPartition, int], ...]:
    """The stopped note; malformed reads as none (it is a report, never used for safety)."""
    if not text:
        return ()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        return ()
    if not isinstance(raw, list):
        return ()
    stopped: list[tuple[TopicPartition, int]] = []
    for item in raw:
        if (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in item[1:])
        ):
            stopped.append((TopicPartition(item[0], item[1]), item[2]))
    return tuple(sorted(stopped))


def parse_rfc3339_ms(text: str) -> int:
    """An RFC 3339 time with its zone (`2026-11-25T09:00:00Z`) in epoch milliseconds; ValueError
    saying what is wrong otherwise."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"expected an RFC 3339 time such as 2026-11-25T09:00:00Z, got {text!r}") from None
    if moment.tzinfo is None:
        raise ValueError(f"the time needs a zone (Z or +hh:mm), got {text!r}")
    return int(moment.timestamp() * 1000)


def _count_or_none(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def fence_annotations(epoch: int, incarnation: str | None = None) -> dict[str, str]:
    """What the operator merges into an expired identity's Lease to void its holdings under
    plans <= `epoch`, naming the incarnation it judged dead when there is one. Written with
    compare-and-swap on the resourceVersion it judged by."""
    annotations = {LEASE_RELEASED_THROUGH_ANNOTATION: str(epoch)}
    if incarnation is not None:
        annotations[LEASE_FENCED_INCARNATION_ANNOTATION] = incarnation
    return annotations


def format_micro_time(seconds: float) -> str:
    """Kubernetes MicroTime (RFC 3339, always six fractional digits, UTC)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: str) -> float:
    """Seconds since the epoch of a MicroTime or Time string; PlanFormatError when it is not one."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError as e:
        raise PlanFormatError("renewTime", f"not an RFC 3339 time: {text!r}") from e


def render_lease(
    *,
    namespace: str,
    policy: str,
    identity: str,
    record: LeaseRecord,
    holder: str,
    duration_s: int,
    renew_time: float,
    acquire_time: float,
    transitions: int,
    resource_version: str | None = None,
) -> dict[str, Any]:
    """A whole Lease object: the consumer writes this on every renewal (with the resourceVersion
    of its last write, so a write that lost the race conflicts instead of overwriting)."""
    metadata: dict[str, Any] = {
        "name": lease_name(policy, identity),
        "namespace": namespace,
        "labels": {POLICY_LABEL: policy},
        "annotations": lease_record_annotations(record, identity),
    }
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_s,
            "acquireTime": format_micro_time(acquire_time),
            "renewTime": format_micro_time(renew_time),
            "leaseTransitions": transitions,
        },
    }
