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

A set of partitions has two JSON forms, and `decode_partitions` reads both:
    legacy   [["orders",0],["orders",3],["orders",4],["orders",5],["refunds",1]]
    compact  {"v":2,"t":{"orders":[0,[3,5]],"refunds":[1]}}
The compact form groups by topic; within a topic, ascending entries: an int is one partition,
[lo, hi] the inclusive run lo..hi (the encoder writes runs of three or more as [lo, hi], shorter
ones as ints). Entries never overlap and never go backwards; partitions are Kafka's int32 ids.

Invariant: a reader sees the compact form only where the legacy text would be large, so the
groupops that wrote the legacy form reads everything small (an upgrade window with an older
reader fails only at sizes that were close to the Kubernetes limits anyway):
  - a set on its own (the Lease note): legacy while its text is at most NOTE_LEGACY_LIMIT_BYTES
    (32 KiB, about 2,000 partitions); it is written on every renewal and read only by the
    operator, which is upgraded first, so it turns compact early, where size starts to cost;
  - a plan's `data` (`encode_plan`): legacy while all its entries together are at most
    PLAN_LEGACY_LIMIT_BYTES (512 KiB, half the ConfigMap limit); beyond, every entry is compact.
    Consumers of the previous version read it during an upgrade, so it keeps the legacy form as
    long as that is not close to failing.
Sizes are checked against the Kubernetes limits by `groupops.planner.plan_size`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from groupops.model import MemberId, Plan, TopicPartition

__all__ = [
    "COMPACT_VERSION",
    "EPOCH_KEY",
    "LEASE_EPOCH_ANNOTATION",
    "LEASE_PARTITIONS_ANNOTATION",
    "MAX_DECODED_PARTITIONS",
    "MAX_PARTITION_ID",
    "NOTE_LEGACY_LIMIT_BYTES",
    "PLAN_LEGACY_LIMIT_BYTES",
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
    "parse_json",
    "partitions_from_runs",
    "plan_configmap_name",
    "topic_runs",
]

EPOCH_KEY = "epoch"
STRATEGY_KEY = "strategy"
LEASE_EPOCH_ANNOTATION = "groupops.dev/epoch"
LEASE_PARTITIONS_ANNOTATION = "groupops.dev/partitions"

COMPACT_VERSION = 2
"""The `v` of the compact form; a reader refuses any other (a newer groupops wrote it)."""
NOTE_LEGACY_LIMIT_BYTES = 32 * 1024
"""`encode_partitions` writes the legacy form while it is at most this long (see the module
docstring): about 2,000 partitions of a six-letter topic."""
PLAN_LEGACY_LIMIT_BYTES = 512 * 1024
"""`encode_plan` writes every entry in the legacy form while they add up to at most this: half of
the ConfigMap's 1 MiB, so plans that the previous version could publish keep their bytes."""
MAX_PARTITION_ID = 2**31 - 1
"""Kafka partition ids are int32."""
MAX_DECODED_PARTITIONS = 4 * 1024 * 1024
"""A compact text that expands to more partitions than this is refused before it is expanded: a
run such as [0, 2147483647] is 15 bytes and would otherwise fill the memory. Four times the
largest group the benchmarks assign (1,000,000 partitions)."""
_RUN_MIN = 3
"""Runs this long or longer are written [lo, hi]: "[3,5]" is never longer than "3,4,5"."""

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


def encode_partitions(
    partitions: Iterable[TopicPartition], *, legacy_limit: int = NOTE_LEGACY_LIMIT_BYTES
) -> str:
    """`partitions` (in any order, repeats ignored) as JSON: the legacy form, byte for byte what
    earlier versions wrote, while it is at most `legacy_limit` bytes; the compact form beyond.
    `legacy_limit=0` always writes the compact form (an empty set included)."""
    unique = sorted(set(partitions))
    if _legacy_floor(len(unique)) <= legacy_limit:
        legacy = _legacy_text(unique)
        if len(legacy) <= legacy_limit:
            return legacy
    return _compact_text(unique)


def _legacy_text(unique: Sequence[TopicPartition]) -> str:
    return json.dumps([[tp.topic, tp.partition] for tp in unique], separators=(",", ":"))


def _legacy_floor(count: int) -> int:
    """A lower bound of the legacy text's length: each entry is at least `["",0]` plus a comma.
    Large sets skip building a text they would throw away."""
    return 7 * count + 1


def _compact_text(unique: Sequence[TopicPartition]) -> str:
    return json.dumps({"v": COMPACT_VERSION, "t": topic_runs(unique)}, separators=(",", ":"))


def topic_runs(unique: Sequence[TopicPartition]) -> dict[str, list[int | list[int]]]:
    """The compact form's topic map of `unique` (sorted, no repeats): topic -> ascending entries,
    an int per partition and [lo, hi] per run of at least three. Also used for the releases."""
    topics: dict[str, list[int | list[int]]] = {}
    for topic, group in itertools.groupby(unique, key=itemgetter(0)):
        entries: list[int | list[int]] = []
        ids = [tp.partition for tp in group]
        start = 0
        for i in range(1, len(ids) + 1):
            if i == len(ids) or ids[i] != ids[i - 1] + 1:
                lo, hi = ids[start], ids[i - 1]
                if hi - lo + 1 >= _RUN_MIN:
                    entries.append([lo, hi])
                else:
                    entries.extend(range(lo, hi + 1))
                start = i
        topics[topic] = entries
    return topics


class _DuplicateKey(ValueError):
    pass


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name in result:
            raise _DuplicateKey(name)
        result[name] = value
    return result


def parse_json(text: str, *, key: str) -> Any:
    """`text` as JSON; an object with a repeated key is refused (JSON itself would keep the last
    one and silently drop a topic's partitions). PlanFormatError naming `key` otherwise."""
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
    except _DuplicateKey as e:
        raise PlanFormatError(key, f"{e.args[0]!r} appears twice in one object") from e
    except json.JSONDecodeError as e:
        raise PlanFormatError(key, f"not JSON: {e.msg}") from e
    except RecursionError as e:
        raise PlanFormatError(key, "not JSON: nested too deeply") from e


def decode_partitions(text: str, *, key: str) -> tuple[TopicPartition, ...]:
    """The partitions of either form, sorted; PlanFormatError naming `key` for anything else."""
    raw = parse_json(text, key=key)
    if isinstance(raw, list):
        return _decode_legacy(raw, key=key)
    if isinstance(raw, dict):
        if set(raw) != {"v", "t"}:
            raise PlanFormatError(key, f'expected the keys "v" and "t", got {sorted(raw)}')
        _check_version(raw["v"], key=key)
        return partitions_from_runs(raw["t"], key=key)
    raise PlanFormatError(key, 'expected a list of [topic, partition] or {"v":2,"t":{...}}')


def _decode_legacy(raw: list[Any], *, key: str) -> tuple[TopicPartition, ...]:
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


def _check_version(version: object, *, key: str) -> None:
    if version != COMPACT_VERSION or isinstance(version, bool):
        raise PlanFormatError(
            key, f"compact form version {version!r} is not {COMPACT_VERSION}: written by a newer groupops?"
        )


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_PARTITION_ID


def partitions_from_runs(
    raw: object, *, key: str, budget: int = MAX_DECODED_PARTITIONS
) -> tuple[TopicPartition, ...]:
    """The partitions of a compact topic map (see `topic_runs`), sorted. Strict: every entry is
    an id or [lo, hi] with lo <= hi, ids are 0..2^31-1, a topic lists at least one entry, each
    entry starts above the previous one's end, and the whole expands to at most `budget`
    partitions; PlanFormatError naming `key` and the topic otherwise."""
    if not isinstance(raw, dict):
        raise PlanFormatError(key, f"expected an object of topic -> partitions, got {raw!r:.80}")
    result: list[TopicPartition] = []
    for topic, entries in sorted(raw.items()):
        if not isinstance(entries, list) or not entries:
            raise PlanFormatError(key, f"topic {topic!r}: expected a non-empty list, got {entries!r:.80}")
        previous = -1
        for entry in entries:
            if _is_id(entry):
                lo = hi = entry
            elif isinstance(entry, list) and len(entry) == 2 and _is_id(entry[0]) and _is_id(entry[1]):
                lo, hi = entry
                if lo > hi:
                    raise PlanFormatError(key, f"topic {topic!r}: run {entry} has lo > hi")
            else:
                raise PlanFormatError(
                    key,
                    f"topic {topic!r}: expected a partition id (0..2^31-1) or [lo, hi], got {entry!r:.80}",
                )
            if lo <= previous:
                raise PlanFormatError(
                    key,
                    f"topic {topic!r}: {entry} overlaps or precedes the entry before it (ends at {previous})",
                )
            budget -= hi - lo + 1
            if budget < 0:
                raise PlanFormatError(
                    key, f"expands to too many partitions (a reader takes at most {MAX_DECODED_PARTITIONS:,})"
                )
            if lo == hi:
                result.append(TopicPartition(topic, lo))
            else:
                result.extend(TopicPartition(topic, p) for p in range(lo, hi + 1))
            previous = hi
    return tuple(result)


def encode_plan(plan: Plan) -> dict[str, str]:
    """The ConfigMap `data` of `plan`: epoch, strategy and one entry per identity, every entry in
    the legacy form while they add up to at most PLAN_LEGACY_LIMIT_BYTES, else every one compact."""
    data = {EPOCH_KEY: str(plan.epoch), STRATEGY_KEY: plan.strategy}
    sets = {identity: sorted(set(partitions)) for identity, partitions in sorted(plan.assignment.items())}
    texts: dict[str, str] = {}
    if sum(_legacy_floor(len(unique)) for unique in sets.values()) <= PLAN_LEGACY_LIMIT_BYTES:
        texts = {identity: _legacy_text(unique) for identity, unique in sets.items()}
    if not texts or sum(len(text) for text in texts.values()) > PLAN_LEGACY_LIMIT_BYTES:
        texts = {identity: _compact_text(unique) for identity, unique in sets.items()}
    data.update(texts)
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
