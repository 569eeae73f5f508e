"""Will it fit? The Kubernetes size limits that the plan ConfigMap and the Lease notes meet, and
the checks that say which limit a plan or a note would break and what to do about it.

Stage: pure planner helper. The operator's publish step calls `plan_configmap_problem` on the
ConfigMap it rendered, before it writes it, and refuses a plan that does not fit with a condition
carrying the message; the consumer calls `lease_note_problem` before it writes the partitions it
owns to its Lease. Strings in, a message or None out; no I/O.

The limits, as the API server and etcd apply them (lengths are Go's `len`: UTF-8 bytes):

- ConfigMap data, 1 MiB. `ValidateConfigMap` (kubernetes pkg/apis/core/validation/validation.go)
  adds up `len(value)` over `data` and `binaryData` (keys are not counted) and refuses
  `totalSize > core.MaxSecretSize`, `MaxSecretSize = 1 * 1024 * 1024` (pkg/apis/core/types.go).
- Annotations, 256 KiB per object, every kind. `ValidateAnnotationsSize` (apimachinery
  pkg/api/validation/objectmeta.go) adds up `len(key) + len(value)` over all annotations and
  refuses more than `TotalAnnotationSizeLimitB = 256 * (1 << 10)`. So the plan ConfigMap has two
  limits, not one: its annotations (the pending releases among them) do not count against the
  1 MiB of data but against their own 256 KiB, and a Lease's notes all share 256 KiB.
- etcd, 1.5 MiB per request. A write carries the whole object (name, labels, annotations,
  managedFields, data), refused beyond `--max-request-bytes`, default `DefaultMaxRequestBytes =
  1.5 * 1024 * 1024` (etcd server/embed/config.go). With data and annotations within their own
  limits this binds only with thousands of identities, whose keys count here (and again in
  managedFields) but not in the data limit.

Margin: groupops refuses at 90 % of each limit (its *budget*), so what the check does not see
(the operator's notes added after the check, a Lease's other notes, a few more partitions in the
next plan, managedFields) still fits, and a refusal comes before the API server's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from groupops.model import TopicPartition
from groupops.planner.plan_format import RELEASING_ANNOTATION
from groupops.planner.wire import (
    EPOCH_KEY,
    LEASE_PARTITIONS_ANNOTATION,
    STRATEGY_KEY,
    decode_partitions,
    encode_partitions,
)

__all__ = [
    "ANNOTATIONS_BUDGET_BYTES",
    "ANNOTATIONS_LIMIT_BYTES",
    "CONFIGMAP_DATA_LIMIT_BYTES",
    "ETCD_REQUEST_LIMIT_BYTES",
    "LEASE_NOTE_BUDGET_BYTES",
    "OBJECT_BUDGET_BYTES",
    "PLAN_DATA_BUDGET_BYTES",
    "SAFETY_MARGIN_PERCENT",
    "annotations_size",
    "data_size",
    "lease_note_problem",
    "lease_note_size",
    "plan_configmap_problem",
]

CONFIGMAP_DATA_LIMIT_BYTES = 1024 * 1024
"""Kubernetes `core.MaxSecretSize`: the most `data` + `binaryData` values of one ConfigMap."""
ANNOTATIONS_LIMIT_BYTES = 256 * 1024
"""Kubernetes `TotalAnnotationSizeLimitB`: the most annotation keys + values of one object."""
ETCD_REQUEST_LIMIT_BYTES = 1536 * 1024
"""etcd's default `--max-request-bytes` (1.5 MiB): the most one write of a whole object may be."""

SAFETY_MARGIN_PERCENT = 10
"""What groupops keeps free of each limit (see the module docstring)."""
PLAN_DATA_BUDGET_BYTES = CONFIGMAP_DATA_LIMIT_BYTES * (100 - SAFETY_MARGIN_PERCENT) // 100
ANNOTATIONS_BUDGET_BYTES = ANNOTATIONS_LIMIT_BYTES * (100 - SAFETY_MARGIN_PERCENT) // 100
LEASE_NOTE_BUDGET_BYTES = ANNOTATIONS_BUDGET_BYTES
"""The partitions note alone (key and value) may take 90 % of the Lease's 256 KiB; the Lease's
other notes (identity, epoch, state, incarnation, errors, ...) have the remaining 26 KiB."""
OBJECT_BUDGET_BYTES = ETCD_REQUEST_LIMIT_BYTES * (100 - SAFETY_MARGIN_PERCENT) // 100
_METADATA_ALLOWANCE_BYTES = 16 * 1024
"""Name, namespace, labels, uid, timestamps and protobuf framing of the stored object; generous."""

_NOTE_KEY_AND_HEADER = len(LEASE_PARTITIONS_ANNOTATION) + len('{"v":2,"t":{}}') - len("[]")

_SPLIT = "spread the topics over more policies, so that each has fewer partitions"


def data_size(data: Mapping[str, str]) -> int:
    """What `ValidateConfigMap` counts: the UTF-8 bytes of the values (not the keys)."""
    return sum(len(value.encode()) for value in data.values())


def annotations_size(annotations: Mapping[str, str]) -> int:
    """What `ValidateAnnotationsSize` counts: the UTF-8 bytes of every key and value."""
    return sum(len(key.encode()) + len(value.encode()) for key, value in annotations.items())


def lease_note_size(partitions: Collection[TopicPartition]) -> int:
    """The bytes the partitions note takes of its Lease's annotations (key and value), encoded as
    the consumer writes it (`wire.encode_partitions`)."""
    return annotations_size({LEASE_PARTITIONS_ANNOTATION: encode_partitions(partitions)})


def lease_note_problem(partitions: Collection[TopicPartition]) -> str | None:
    """None when a Lease note of `partitions` fits its budget; otherwise why not and what to do.

    >>> lease_note_problem([TopicPartition("orders", 0)]) is None
    True
    """
    size = lease_note_size(partitions)
    if size <= LEASE_NOTE_BUDGET_BYTES:
        return None
    return _lease_note_message(f"a replica owning {len(set(partitions)):,} partitions", size)


def _lease_note_message(who: str, size: int) -> str:
    return (
        f"{who} would need a Lease note ({LEASE_PARTITIONS_ANNOTATION}) of {size:,} bytes; Kubernetes "
        f"refuses more than {ANNOTATIONS_LIMIT_BYTES:,} bytes (256 KiB) of annotations on one object "
        f"and groupops keeps this note within {LEASE_NOTE_BUDGET_BYTES:,} so the Lease's other notes fit: "
        f"run more replicas, so that each owns fewer partitions, or {_SPLIT}"
    )


def plan_configmap_problem(data: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
    """None when the plan ConfigMap with this `data` and these `annotations` fits every limit with
    the margin, and every identity could report its set on its Lease; otherwise a message naming
    the first limit broken, the size and what to do.

    Pass everything that will be written (the operator's own notes included): the checks are, in
    order, the data (1 MiB), the annotations (256 KiB), the whole object (etcd's 1.5 MiB, an
    estimate) and each identity's set as its consumer will write it to its Lease (256 KiB): a plan
    whose consumer cannot acknowledge it is refused with the plan, not discovered on the Lease.
    Raises PlanFormatError when an identity's entry is not in the wire format."""
    size = data_size(data)
    if size > PLAN_DATA_BUDGET_BYTES:
        return (
            f"the plan ConfigMap's data would be {size:,} bytes; Kubernetes refuses a ConfigMap whose "
            f"data exceeds {CONFIGMAP_DATA_LIMIT_BYTES:,} bytes (1 MiB) and groupops keeps "
            f"{SAFETY_MARGIN_PERCENT} % free ({PLAN_DATA_BUDGET_BYTES:,} bytes): {_SPLIT} (a strategy "
            f"that gives each replica runs of consecutive partitions, such as range, also takes less room)"
        )
    size = annotations_size(annotations)
    if size > ANNOTATIONS_BUDGET_BYTES:
        largest = max(annotations, key=lambda key: len(annotations[key].encode()))
        hint = (
            "move fewer partitions at once (let the pending releases finish) or " + _SPLIT
            if largest == RELEASING_ANNOTATION
            else _SPLIT
        )
        return (
            f"the plan ConfigMap's annotations would be {size:,} bytes (the largest, {largest}, "
            f"{len(annotations[largest].encode()):,}); Kubernetes refuses more than "
            f"{ANNOTATIONS_LIMIT_BYTES:,} bytes (256 KiB) of annotations on one object and groupops "
            f"keeps {SAFETY_MARGIN_PERCENT} % free ({ANNOTATIONS_BUDGET_BYTES:,} bytes): {hint}"
        )
    # Keys count in the stored object, and once more in managedFields (`"f:<key>":{}`).
    keys = sum(len(key.encode()) + 8 for key in (*data, *annotations))
    size = data_size(data) + annotations_size(annotations) + keys + _METADATA_ALLOWANCE_BYTES
    if size > OBJECT_BUDGET_BYTES:
        return (
            f"the plan ConfigMap would be about {size:,} bytes as a whole ({len(data) - 2:,} identities); "
            f"etcd refuses a write over {ETCD_REQUEST_LIMIT_BYTES:,} bytes (1.5 MiB, its default "
            f"--max-request-bytes) and groupops keeps {SAFETY_MARGIN_PERCENT} % free "
            f"({OBJECT_BUDGET_BYTES:,} bytes): {_SPLIT}"
        )
    for identity, text in sorted(data.items()):
        # A set's note is at most 12 bytes longer than its plan entry (the compact form's header
        # where the entry is legacy and the note compact), so only large entries are re-encoded.
        if (
            identity in (EPOCH_KEY, STRATEGY_KEY)
            or len(text) + _NOTE_KEY_AND_HEADER <= LEASE_NOTE_BUDGET_BYTES
        ):
            continue
        partitions = decode_partitions(text, key=identity)
        size = lease_note_size(partitions)
        if size > LEASE_NOTE_BUDGET_BYTES:
            return _lease_note_message(f"identity {identity}, owning {len(partitions):,} partitions,", size)
    return None
