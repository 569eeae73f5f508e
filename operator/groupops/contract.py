"""The `groupops assign` JSON contract: parse one group, render one result.

Input (docs/design.md §3.3): `strategy`, `topics` {name: count}, `members` [{`member_id`,
`group_instance_id`, `topics`, `owned`, `generation`, `rack`, `priority`, `capacity`}], `lags`
{topic: [lag per partition]}, `partition_racks` {topic: [[rack, ...] per partition]}, `options`
{`max_moves`, `failback`}. Pydantic checks the shapes; the cross-field rules (a subscription names
a known topic, one lag per partition, unique ids) are checked here. Every failure is an
`InputError` whose `field` names where in the document it is, e.g. `members[2].owned[0]`.

Used by the CLI, the Spark `plan` job and the Kafka differential harness, so all three read the
same format. Pure: no I/O beyond what the caller hands in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from groupops.model import (
    Assignment,
    AssignOptions,
    GroupInput,
    Member,
    MemberId,
    TopicPartition,
)

__all__ = ["InputError", "assignment_to_json", "group_to_json", "parse_group", "parse_group_text"]


class InputError(ValueError):
    """Bad input. `field` is the JSON path of the offending value."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{message} ({field})")
        self.field = field
        self.message = message


NonNegativeInt = Annotated[int, Field(ge=0, strict=True)]


class _OptionsDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_moves: NonNegativeInt | None = None
    failback: bool = True


class _MemberDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    member_id: Annotated[str, Field(min_length=1)]
    group_instance_id: Annotated[str, Field(min_length=1)] | None = None
    topics: list[str]
    owned: list[tuple[str, NonNegativeInt]] = []
    generation: int | None = None
    rack: str | None = None
    priority: int = 0
    capacity: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0


class _GroupDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    strategy: Annotated[str, Field(min_length=1)]
    topics: dict[str, NonNegativeInt]
    members: list[_MemberDoc]
    lags: dict[str, list[NonNegativeInt]] = {}
    partition_racks: dict[str, list[list[str]]] = {}
    options: _OptionsDoc = _OptionsDoc()


def _json_path(location: Sequence[int | str]) -> str:
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "<document>"


def _first_error(error: ValidationError) -> InputError:
    first = error.errors(include_url=False)[0]
    location = [part for part in first["loc"] if not str(part).startswith("function-")]
    message = first["msg"]
    if first["type"] == "greater_than_equal" and "lags" in location:
        message = "lag must not be negative"
    return InputError(_json_path(location), message[0].lower() + message[1:])


def parse_group_text(text: str) -> tuple[str, GroupInput]:
    """Parse a JSON document; malformed JSON is an InputError on `<document>`."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError("<document>", f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    return parse_group(document)


def parse_group(document: Any) -> tuple[str, GroupInput]:
    """Validate one group document and build the engine's input. Returns (strategy, group)."""
    if not isinstance(document, Mapping):
        raise InputError("<document>", "expected a JSON object with strategy, topics and members")
    try:
        doc = _GroupDoc.model_validate(document)
    except ValidationError as e:
        raise _first_error(e) from e

    for topic, count in doc.topics.items():
        if not topic:
            raise InputError("topics", "topic name must not be empty")
        del count
    members = tuple(_member(index, member, doc.topics) for index, member in enumerate(doc.members))
    _check_unique(members)
    lags = _lags(doc.lags, doc.topics)
    racks = _racks(doc.partition_racks, doc.topics)
    options = AssignOptions(max_moves=doc.options.max_moves, failback=doc.options.failback)
    group = GroupInput(
        topics=dict(doc.topics), members=members, lags=lags, partition_racks=racks, options=options
    )
    return doc.strategy, group


def _member(index: int, doc: _MemberDoc, topics: Mapping[str, int]) -> Member:
    where = f"members[{index}]"
    for position, topic in enumerate(doc.topics):
        if topic not in topics:
            raise InputError(f"{where}.topics[{position}]", f"unknown topic {topic!r}: not in `topics`")
    owned: list[TopicPartition] = []
    seen: set[TopicPartition] = set()
    for position, (topic, partition) in enumerate(doc.owned):
        tp = TopicPartition(topic, partition)
        if topic not in topics:
            raise InputError(f"{where}.owned[{position}]", f"unknown topic {topic!r}: not in `topics`")
        if partition >= topics[topic]:
            raise InputError(
                f"{where}.owned[{position}]",
                f"partition {partition} out of range: topic {topic!r} has {topics[topic]} partitions",
            )
        if tp in seen:
            raise InputError(f"{where}.owned[{position}]", f"partition {tp} listed twice")
        seen.add(tp)
        owned.append(tp)
    return Member(
        member_id=MemberId(doc.member_id),
        topics=frozenset(doc.topics),
        group_instance_id=doc.group_instance_id,
        owned=tuple(owned),
        generation=doc.generation,
        rack=doc.rack,
        priority=doc.priority,
        capacity=doc.capacity,
    )


def _check_unique(members: Sequence[Member]) -> None:
    member_ids: dict[str, int] = {}
    instance_ids: dict[str, int] = {}
    for index, member in enumerate(members):
        if member.member_id in member_ids:
            raise InputError(
                f"members[{index}].member_id",
                f"duplicate member id {member.member_id!r} (also members[{member_ids[member.member_id]}])",
            )
        member_ids[member.member_id] = index
        instance = member.group_instance_id
        if instance is not None:
            if instance in instance_ids:
                raise InputError(
                    f"members[{index}].group_instance_id",
                    f"duplicate group instance id {instance!r} (also members[{instance_ids[instance]}])",
                )
            instance_ids[instance] = index


def _lags(lags: Mapping[str, list[int]], topics: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    for topic, per_partition in lags.items():
        if topic not in topics:
            raise InputError(f"lags.{topic}", f"unknown topic {topic!r}: not in `topics`")
        if len(per_partition) != topics[topic]:
            raise InputError(
                f"lags.{topic}",
                f"{len(per_partition)} lags for {topics[topic]} partitions: give one lag per partition",
            )
    return {topic: tuple(per_partition) for topic, per_partition in lags.items()}


def _racks(
    racks: Mapping[str, list[list[str]]], topics: Mapping[str, int]
) -> dict[str, tuple[frozenset[str], ...]]:
    for topic, per_partition in racks.items():
        if topic not in topics:
            raise InputError(f"partition_racks.{topic}", f"unknown topic {topic!r}: not in `topics`")
        if len(per_partition) != topics[topic]:
            raise InputError(
                f"partition_racks.{topic}",
                f"{len(per_partition)} rack lists for {topics[topic]} partitions: give one per partition",
            )
    return {topic: tuple(frozenset(r) for r in per_partition) for topic, per_partition in racks.items()}


def assignment_to_json(assignment: Assignment) -> dict[str, list[list[str | int]]]:
    """`{member_id: [[topic, partition], ...]}`, each list sorted by topic then partition."""
    return {
        member_id: [[tp.topic, tp.partition] for tp in sorted(partitions)]
        for member_id, partitions in assignment.items()
    }


def group_to_json(strategy: str, group: GroupInput) -> dict[str, Any]:
    """The inverse of `parse_group`, for generators (tests, benchmarks, the Kafka harness)."""
    members: list[dict[str, Any]] = []
    for member in group.members:
        entry: dict[str, Any] = {"member_id": member.member_id, "topics": sorted(member.topics)}
        if member.group_instance_id is not None:
            entry["group_instance_id"] = member.group_instance_id
        if member.owned:
            entry["owned"] = [[tp.topic, tp.partition] for tp in member.owned]
        if member.generation is not None:
            entry["generation"] = member.generation
        if member.rack is not None:
            entry["rack"] = member.rack
        if member.priority:
            entry["priority"] = member.priority
        if member.capacity != 1.0:
            entry["capacity"] = member.capacity
        members.append(entry)
    document: dict[str, Any] = {"strategy": strategy, "topics": dict(group.topics), "members": members}
    if group.lags:
        document["lags"] = {topic: [int(lag) for lag in lags] for topic, lags in group.lags.items()}
    if group.partition_racks:
        document["partition_racks"] = {
            topic: [sorted(racks) for racks in per_partition]
            for topic, per_partition in group.partition_racks.items()
        }
    options: dict[str, Any] = {}
    if group.options.max_moves is not None:
        options["max_moves"] = group.options.max_moves
    if not group.options.failback:
        options["failback"] = False
    if options:
        document["options"] = options
    return document
