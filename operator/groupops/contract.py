"""The `groupops assign` JSON contract: parse one group, render one result.

Input (docs/design.md §3.3): `strategy`, `topics` {name: count}, `members` [{`member_id`,
`group_instance_id`, `topics`, `owned`, `generation`, `rack`, `priority`, `capacity`}], `lags`
{topic: [lag per partition]}, `partition_racks` {topic: [[rack, ...] per partition]}, `options`
{`max_moves`, `failback`}. Every failure is an `InputError` whose `field` names where in the
document it is, e.g. `members[2].owned[0]`.

How, and why so: a group can hold a million owned partitions and a million lags, and the engine
assigns them in well under a second, so parsing must cost no more than that.
1. msgspec decodes the JSON straight into typed structs (`_GroupDoc`) and checks every type,
   shape and bound in C while it decodes (`owned` pairs become TopicPartitions there and then,
   `partition >= 0` and `lag >= 0` included); its first error is mapped to our message and JSON
   path (`_input_error`).
2. The rules across fields are checked here on whole lists: unique member and instance ids, no
   partition owned twice by one member (one set per member), one lag and one rack list per
   partition of a topic in `topics`. Lags become numpy arrays, as the strategies use them.
3. All of it runs with the cyclic garbage collector paused: a million new acyclic tuples would
   otherwise make it walk them again and again (`groupops.assign.common.collector_paused`).
Members may subscribe to topics not in `topics` and own partitions that no longer exist: Kafka's
normal case after a topic is deleted or recreated (`GroupInput`).

`render_result` writes the command's output directly as JSON bytes (TopicPartitions encode as
`[topic, partition]` arrays), relying on the engine's promise that every list is sorted.

Used by the CLI, the Spark `plan` job and the Kafka differential harness, so all three read the
same format; the policy parser (controller/spec.py) shares its reading of msgspec's errors
(`split_validation_message`, `plain_message`). Pure: no I/O beyond what the caller hands in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any, Final

import msgspec
import numpy as np
from msgspec import Meta, Struct

from groupops.assign.common import collector_paused
from groupops.model import (
    Assignment,
    AssignOptions,
    GroupInput,
    LagValues,
    Member,
    MemberId,
    TopicPartition,
)

__all__ = [
    "InputError",
    "assignment_to_json",
    "group_to_json",
    "parse_group",
    "parse_group_text",
    "plain_message",
    "render_result",
    "split_validation_message",
]


class InputError(ValueError):
    """Bad input. `field` is the JSON path of the offending value."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{message} ({field})")
        self.field = field
        self.message = message


_NonNegative = Annotated[int, Meta(ge=0)]
_NonEmpty = Annotated[str, Meta(min_length=1)]
# Lags are held as int64 arrays; the bound makes a larger one an input error, not an overflow.
_Lag = Annotated[int, Meta(ge=0, le=2**63 - 1)]


class _OwnedPartition(TopicPartition):
    """A TopicPartition as the decoder builds it: the same tuple (equal, same hash, same order,
    same str and attributes), with `partition >= 0` for msgspec to check while decoding."""

    __slots__ = ()


# Set after the class statement: NamedTuple classes may not declare fields in a subclass body.
_OwnedPartition.__annotations__ = {"topic": str, "partition": _NonNegative}


class _OptionsDoc(Struct, forbid_unknown_fields=True, frozen=True):
    max_moves: _NonNegative | None = None
    failback: bool = True


class _MemberDoc(Struct, forbid_unknown_fields=True):
    member_id: _NonEmpty
    # Left as raw JSON by the decoder: members mostly share one subscription, which is then
    # decoded once (`_Subscriptions`) instead of once per member.
    topics: msgspec.Raw
    group_instance_id: _NonEmpty | None = None
    owned: tuple[_OwnedPartition, ...] = ()
    generation: int | None = None
    rack: str | None = None
    priority: int = 0
    capacity: Annotated[float, Meta(gt=0)] = 1.0


class _GroupDoc(Struct, forbid_unknown_fields=True):
    strategy: _NonEmpty
    topics: dict[str, _NonNegative]
    members: list[_MemberDoc]
    lags: dict[str, list[_Lag]] = {}
    partition_racks: dict[str, list[list[str]]] = {}
    options: _OptionsDoc = _OptionsDoc()


_DECODER: Final = msgspec.json.Decoder(_GroupDoc)
# Enough to pause the collector for any document; its size is not known before decoding.
_LARGE: Final = 1 << 20


def parse_group_text(text: str | bytes) -> tuple[str, GroupInput]:
    """Parse a JSON document; malformed JSON is an InputError on `<document>`."""
    with collector_paused(_LARGE):
        try:
            doc = _DECODER.decode(text)
        except msgspec.ValidationError as e:
            raise _input_error(str(e), lambda: msgspec.json.decode(text)) from e
        except msgspec.DecodeError as e:
            raise _malformed(text, e) from e
        return doc.strategy, _build(doc)


def parse_group(document: Any) -> tuple[str, GroupInput]:
    """Validate one group document already loaded from JSON (dicts, lists, str, int, float,
    bool, None) and build the engine's input. Returns (strategy, group). The document goes
    through JSON once more, so that both entry points share one decoder and one set of messages
    (encoding is a small fraction of decoding)."""
    try:
        text = msgspec.json.encode(document)
    except (TypeError, ValueError, OverflowError) as e:
        raise InputError("<document>", f"not JSON data: {e}") from e
    return parse_group_text(text)


def _build(doc: _GroupDoc) -> GroupInput:
    if "" in doc.topics:
        raise InputError("topics", "topic name must not be empty")
    subscriptions = _Subscriptions()
    members = tuple(_member(index, member, subscriptions) for index, member in enumerate(doc.members))
    _check_unique(members)
    return GroupInput(
        topics=doc.topics,
        members=members,
        lags=_lags(doc.lags, doc.topics),
        partition_racks=_racks(doc.partition_racks, doc.topics),
        options=AssignOptions(max_moves=doc.options.max_moves, failback=doc.options.failback),
    )


class _Subscriptions:
    """Each distinct `topics` list decoded once; members with the same subscription share one
    frozenset, so everything downstream that groups members by subscription compares them by
    identity."""

    _DECODER: Final = msgspec.json.Decoder(list[str])

    def __init__(self) -> None:
        self._seen: dict[bytes, frozenset[str]] = {}

    def get(self, raw: msgspec.Raw, where: str) -> frozenset[str]:
        key = bytes(raw)
        topics = self._seen.get(key)
        if topics is None:
            try:
                topics = frozenset(self._DECODER.decode(key))
            except msgspec.ValidationError as e:
                message, at = split_validation_message(str(e))
                path = where + at
                raise InputError(path, _our_words(message, path)) from e
            self._seen[key] = topics
        return topics


def _member(index: int, doc: _MemberDoc, subscriptions: _Subscriptions) -> Member:
    # A subscription to a topic not in `topics`, and owned partitions that no longer exist, are
    # accepted: members report them after a topic is deleted or recreated (design §3.3).
    owned = doc.owned
    if len(set(owned)) != len(owned):
        _raise_owned_twice(f"members[{index}]", owned)
    if not math.isfinite(doc.capacity):
        raise InputError(f"members[{index}].capacity", "capacity must be a finite number")
    return Member(
        member_id=MemberId(doc.member_id),
        topics=subscriptions.get(doc.topics, f"members[{index}].topics"),
        group_instance_id=doc.group_instance_id,
        owned=owned,
        generation=doc.generation,
        rack=doc.rack,
        priority=doc.priority,
        capacity=doc.capacity,
    )


def _raise_owned_twice(where: str, owned: Sequence[TopicPartition]) -> None:
    seen: set[TopicPartition] = set()
    for position, tp in enumerate(owned):
        if tp in seen:
            raise InputError(f"{where}.owned[{position}]", f"partition {tp} listed twice")
        seen.add(tp)


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


def _lags(lags: Mapping[str, list[int]], topics: Mapping[str, int]) -> dict[str, LagValues]:
    """Lags per topic as int64 arrays. Lags of a topic not in `topics` are an error, not a member
    lagging behind: lags and `topics` come from the same metadata (design §3.3)."""
    for topic, per_partition in lags.items():
        if topic not in topics:
            raise InputError(
                f"lags.{topic}",
                f"lags for topic {topic!r}, which is not in `topics`: give lags only for topics in `topics`",
            )
        if len(per_partition) != topics[topic]:
            raise InputError(
                f"lags.{topic}",
                f"{len(per_partition)} lags for {topics[topic]} partitions: give one lag per partition",
            )
    return {topic: np.array(per_partition, dtype=np.int64) for topic, per_partition in lags.items()}


def _racks(
    racks: Mapping[str, list[list[str]]], topics: Mapping[str, int]
) -> dict[str, tuple[frozenset[str], ...]]:
    for topic, per_partition in racks.items():
        if topic not in topics:
            raise InputError(
                f"partition_racks.{topic}",
                f"rack lists for topic {topic!r}, which is not in `topics`: "
                "give racks only for topics in `topics`",
            )
        if len(per_partition) != topics[topic]:
            raise InputError(
                f"partition_racks.{topic}",
                f"{len(per_partition)} rack lists for {topics[topic]} partitions: give one per partition",
            )
    return {topic: tuple(frozenset(r) for r in per_partition) for topic, per_partition in racks.items()}


# The top-level objects keyed by topic, with the type of one value: msgspec's error path says
# `lags[...]` without the key, which `_key_of_error` then finds.
_BY_TOPIC: Final[dict[str, Any]] = {
    "topics": _NonNegative,
    "lags": list[_Lag],
    "partition_racks": list[list[str]],
}
_NOT_NEGATIVE: Final = {
    "lags": "lag must not be negative",
    "owned": "partition must not be negative",
    "topics": "partition count must not be negative",
    "max_moves": "max_moves must not be negative",
}


def _input_error(text: str, document: Callable[[], Any]) -> InputError:
    """Turn msgspec's "<message> - at `$.members[2].owned[0]`" into an InputError on
    `members[2].owned[0]`, with the message in our words. `document` gives the document as plain
    values, read again only to name the topic of an error inside `topics`, `lags` or
    `partition_racks`."""
    message, where = split_validation_message(text)
    path = where.removeprefix(".")
    field, _, rest = path.partition("[...]")
    if field in _BY_TOPIC and path != field:
        located = _key_of_error(field, document())
        if located is not None:
            return located
        path = f"{field}{rest}"
    if message.startswith("Object missing required field `"):
        return InputError(_join(path, message.split("`")[1]), "field required")
    if message.startswith("Object contains unknown field `"):
        return InputError(
            _join(path, message.split("`")[1]),
            "unknown field: not part of the contract (docs/design.md §3.3)",
        )
    if not path:
        if message.startswith("Expected `object`"):
            return InputError("<document>", "expected a JSON object with strategy, topics and members")
        path = "<document>"
    return InputError(path, _our_words(message, path))


def _key_of_error(field: str, document: Any) -> InputError | None:
    """The first entry of `document[field]` that does not validate, as an InputError on
    `field.topic...`; None if the document cannot be read that way."""
    entries = document.get(field) if isinstance(document, Mapping) else None
    if not isinstance(entries, Mapping):
        return None
    for topic, value in entries.items():
        try:
            msgspec.convert(value, _BY_TOPIC[field])
        except msgspec.ValidationError as e:
            message, where = split_validation_message(str(e))
            path = f"{field}.{topic}{where}"
            return InputError(path, _our_words(message, path))
    return None


def _our_words(message: str, path: str) -> str:
    if message.startswith("Expected `int` >= 0"):
        for key, ours in _NOT_NEGATIVE.items():
            if key in path:
                return ours
    if ".owned[" in path and message.startswith("Expected `array` of length 2"):
        return "expected [topic, partition]"
    if message.startswith("Expected `str` of length >= 1"):
        return "must not be empty"
    if message.startswith("Expected `float` > 0.0"):
        return "must be greater than 0"
    return plain_message(message)


def _join(path: str, field: str) -> str:
    return f"{path}.{field}" if path else field


def split_validation_message(text: str) -> tuple[str, str]:
    """msgspec's "<message> - at `$.members[2].owned[0]`" as ("<message>", ".members[2].owned[0]"):
    the path below the root as msgspec writes it (`.field`, `[index]`, `[...]` for a dict's
    value), "" at the root, so that a caller prefixes its own root. An error in a dict's key
    ("- at `key` in `$.lags`") is located at the dict, its message ending in "(in a key)".
    Shared with the policy parser (controller/spec.py), which maps the same paths."""
    message, _, where = text.partition(" - at `")
    _, in_a_key, mapping = where.partition("` in `")
    if in_a_key:
        message, where = f"{message} (in a key)", mapping
    return message, where.rstrip("`").removeprefix("$")


def plain_message(message: str) -> str:
    """msgspec's wording without its backticks and capital: "expected int, got str"."""
    text = (
        message.replace("`", "").replace(" | null", " or null").replace("Expected float", "Expected number")
    )
    return text[:1].lower() + text[1:]


def _malformed(text: str | bytes, error: msgspec.DecodeError) -> InputError:
    """Malformed JSON, located by line and column as Python's json module reports it."""
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        return InputError("<document>", f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}")
    except UnicodeDecodeError:
        return InputError("<document>", "malformed JSON: not UTF-8 text")
    # json accepts what msgspec refuses (NaN, Infinity): say what msgspec said.
    return InputError("<document>", f"malformed JSON: {plain_message(str(error))}")


_ENCODER: Final = msgspec.json.Encoder()


def render_result(assignment: Assignment, stats: Mapping[str, Any]) -> bytes:
    """The command's output, `{"assignment": {member_id: [[topic, partition], ...]}, "stats":
    {...}}`, as JSON bytes. The lists are written as the strategy returned them: sorted, which
    every strategy promises (`invariants.check_assignment`)."""
    return _ENCODER.encode({"assignment": assignment, "stats": stats})


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
        document["lags"] = {topic: _ints(lags) for topic, lags in group.lags.items()}
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


def _ints(values: Iterable[int] | LagValues) -> list[int]:
    return [int(value) for value in values]
