"""Offset resets the operator carries out for a policy (docs/design.md §9.3): pause the
partitions, reset the group's offsets, resume, with no message lost or owned twice.

Who calls it: the reconcile (`controller/reconcile.py`), each run. `groupops reset-offsets`
(commands/reset_offsets.py) asks by setting the policy annotation `groupops.dev/reset-offsets`
to a JSON request and reads the outcome from `status.offsetReset`:

    {"id": "r-1a2b", "to": "earliest" | "latest" | "datetime" | "shift" | "offset",
     "value": <epoch ms | shift | offset>, "topics": {"orders": [0, 1], "refunds": null},
     "execute": true}

`topics` null or absent: every partition of every topic of the policy; a topic mapped to null:
all its partitions. Without `execute` it is a dry run: the table is computed and shown, nothing
is paused or written. With `execute`, while the request is pending (its id is not the one in
`status.offsetReset` with a final state) the plan gives its partitions to nobody (the usual
two-epoch release, so their owners commit what they processed and stop); once none is owned or
being released the new offsets are committed, the status says `Done`, and the next plan assigns
them again: their new owners start at the new offsets. A request is carried out once per id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from groupops.controller.context import RunContext, iso
from groupops.controller.names import ANNOTATION_RESET_OFFSETS
from groupops.lag.reset import PartitionReset, ResetKind, ResetTarget
from groupops.model import TopicPartition
from groupops.planner.plan_format import PublishedPlan

__all__ = [
    "FINAL_STATES",
    "ResetRequest",
    "ResetRequestError",
    "paused_partitions",
    "pending",
    "pending_id",
    "read_request",
    "request_id_of",
    "reset_status",
    "still_held",
]

FINAL_STATES = ("Done", "DryRun", "Failed")
_ID_MAX = 63


class ResetRequestError(ValueError):
    """The annotation does not hold a valid request; `field` names the part."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{message} ({field})")
        self.field = field


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetRequest:
    id: str
    target: ResetTarget
    topics: Mapping[str, tuple[int, ...] | None] | None
    execute: bool

    def describe(self) -> str:
        value = "" if self.target.value is None else f" {self.target.value}"
        return f"{self.target.kind.value}{value}"


def read_request(annotations: Mapping[str, str] | None) -> ResetRequest | None:
    """The request in the policy's annotation, None when there is none. ResetRequestError when
    it is malformed (the status says why; the policy keeps running)."""
    raw_text = (annotations or {}).get(ANNOTATION_RESET_OFFSETS)
    if not raw_text:
        return None
    where = ANNOTATION_RESET_OFFSETS
    try:
        raw = json.loads(raw_text)
    except json.JSONDecodeError as e:
        raise ResetRequestError(where, f"not JSON: {e.msg}") from e
    if not isinstance(raw, dict):
        raise ResetRequestError(where, "expected a JSON object with id and to")
    request_id = raw.get("id")
    if not isinstance(request_id, str) or not 0 < len(request_id) <= _ID_MAX:
        raise ResetRequestError(f"{where}.id", f"expected a name of 1 to {_ID_MAX} characters")
    try:
        kind = ResetKind(str(raw.get("to")))
    except ValueError:
        choices = ", ".join(k.value for k in ResetKind)
        raise ResetRequestError(f"{where}.to", f"choose {choices}; got {raw.get('to')!r}") from None
    value = raw.get("value")
    if kind in (ResetKind.EARLIEST, ResetKind.LATEST):
        value = None
    elif isinstance(value, bool) or not isinstance(value, int):
        raise ResetRequestError(f"{where}.value", f"{kind.value} needs an integer value, got {value!r}")
    elif kind is not ResetKind.SHIFT and value < 0:
        raise ResetRequestError(f"{where}.value", f"{kind.value} needs a value of 0 or more, got {value}")
    return ResetRequest(
        id=request_id,
        target=ResetTarget(kind, value),
        topics=_topics(raw.get("topics"), f"{where}.topics"),
        execute=raw.get("execute") is True,
    )


def _topics(raw: Any, where: str) -> Mapping[str, tuple[int, ...] | None] | None:
    if raw is None:
        return None
    if isinstance(raw, list) and all(isinstance(t, str) and t for t in raw):
        return dict.fromkeys(raw)
    if not isinstance(raw, dict):
        raise ResetRequestError(where, "expected a list of topics or {topic: [partition, ...] | null}")
    topics: dict[str, tuple[int, ...] | None] = {}
    for topic, partitions in raw.items():
        if partitions is None:
            topics[topic] = None
        elif isinstance(partitions, list) and all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            topics[topic] = tuple(sorted(set(partitions)))
        else:
            raise ResetRequestError(f"{where}.{topic}", "expected a list of partition numbers or null")
    return topics


def pending(request: ResetRequest | None, status: Mapping[str, Any]) -> bool:
    """Whether `request` still has to be carried out (its id has no final state in status)."""
    return request is not None and pending_id(request.id, status)


def pending_id(request_id: str, status: Mapping[str, Any]) -> bool:
    done = status.get("offsetReset") or {}
    return not (done.get("id") == request_id and done.get("state") in FINAL_STATES)


def paused_partitions(request: ResetRequest, topics: Mapping[str, int]) -> list[TopicPartition]:
    """The partitions the request resets, checked against the policy's topics and their counts."""
    wanted = request.topics if request.topics is not None else dict.fromkeys(topics)
    partitions: list[TopicPartition] = []
    for topic, numbers in wanted.items():
        if topic not in topics:
            raise ResetRequestError(
                f"{ANNOTATION_RESET_OFFSETS}.topics",
                f"{topic!r} is not a topic of this policy ({', '.join(topics)})",
            )
        count = topics[topic]
        chosen = range(count) if numbers is None else numbers
        beyond = [p for p in chosen if p >= count]
        if beyond:
            raise ResetRequestError(
                f"{ANNOTATION_RESET_OFFSETS}.topics.{topic}",
                f"partitions {beyond} beyond its {count} partitions",
            )
        partitions.extend(TopicPartition(topic, p) for p in chosen)
    return sorted(partitions)


def still_held(plan: PublishedPlan, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
    """The paused partitions some identity still owns or is still releasing in `plan`."""
    wanted = set(partitions)
    owned = {tp for tps in plan.plan.assignment.values() for tp in tps}
    return sorted(wanted & (owned | set(plan.releasing)))


def reset_status(
    run: RunContext,
    request_id: str,
    state: str,
    message: str,
    *,
    request: ResetRequest | None = None,
    rows: Sequence[PartitionReset] = (),
) -> dict[str, Any]:
    """`status.offsetReset`. Only a final state carries a time (`finishedAt`), so a pending
    reset does not rewrite the status every run."""
    status: dict[str, Any] = {"id": request_id, "state": state, "message": message[:1000]}
    if request is not None:
        status["to"] = request.describe()
        status["execute"] = request.execute
    if rows:
        status["partitions"] = [
            {"partition": str(row.partition), "before": row.before, "after": row.after} for row in rows
        ]
    if state in FINAL_STATES:
        status["finishedAt"] = iso(run.now)
    return status


def request_id_of(annotations: Mapping[str, str] | None) -> str:
    """The id of a request, even a malformed one, when it can be read (for its Failed status)."""
    try:
        raw = json.loads((annotations or {}).get(ANNOTATION_RESET_OFFSETS) or "{}")
    except json.JSONDecodeError:
        return ""
    found = raw.get("id") if isinstance(raw, dict) else None
    return found if isinstance(found, str) else ""
