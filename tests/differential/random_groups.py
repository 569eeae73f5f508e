"""Random consumer groups for the differential tests against Apache Kafka's assignors.

`random_group(rng)` draws one valid group (it passes `groupops.contract.parse_group`) from a
seeded `random.Random`, covering what makes Kafka's assignors branch:
- member order: static members (group.instance.id) and dynamic ones, ids that Java orders by UTF-16
  code unit ("B" < "a", "consumer10" < "consumer2", a character beyond the BMP before U+FF5A);
- subscriptions: all equal (the sticky assignors' constrained path) or unequal, empty ones,
  topics with 0 partitions, topics of equal size with the same subscribers (range co-partitioning);
- racks: none, members with and without racks (and the empty rack id Kafka ignores), replica racks
  absent, the same on every partition (rack-aware assignment off), aligned by partition number,
  or random subsets including racks no member is on;
- a previous assignment: owned partitions with generations (current, older, unknown), partitions
  claimed by two members, owned partitions of topics no longer subscribed, members that own nothing;
- topics out of step with the metadata, as after a topic is deleted or recreated: subscriptions
  to topics not in `topics`, owned partitions of topics no longer in `topics`, and owned
  partitions beyond a topic's count (recreated with fewer partitions).
"""

from __future__ import annotations

import random

from groupops.model import GroupInput, Member, MemberId, TopicPartition

__all__ = ["random_group", "random_groups"]

TOPIC_NAMES = (
    "t0", "t1", "t2", "t3", "T", "orders", "orders.v2", "topic10", "topic2", "Ω", "\uff5a", "\U0001d518",
)  # fmt: skip
MEMBER_NAMES = (
    "B",
    "a",
    "A",
    "b",
    "consumer10",
    "consumer2",
    "consumer1",
    "C0",
    "C1",
    "C2",
    "\uff5am",
    "\U0001d518m",
)
# Topics a member may name that the metadata does not hold (besides unused TOPIC_NAMES).
MISSING_TOPIC_NAMES = ("gone", "t9", "orders.v1", "\U0001d518x")
INSTANCE_NAMES = ("I0", "I1", "I2", "I10", "instance-10", "instance-2", "Z", "a", "\U0001d518i", "\uff5ai")
RACKS = ("r1", "r2", "r3")


def _unique(rng: random.Random, pool: tuple[str, ...], taken: set[str]) -> str:
    for _ in range(4):
        name = rng.choice(pool)
        if name not in taken:
            taken.add(name)
            return name
    while True:
        name = f"{rng.choice(pool)}-{rng.getrandbits(24):06x}"
        if name not in taken:
            taken.add(name)
            return name


def _topics(rng: random.Random, large: bool) -> dict[str, int]:
    names = rng.sample(TOPIC_NAMES, rng.randint(1, 5 if large else 4))
    equal_sizes = rng.random() < 0.4
    size = rng.choice((2, 3, 4, 6, 8))
    sizes = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16) + ((24, 30) if large else ())
    return {
        name: size
        if equal_sizes and rng.random() < 0.85
        else rng.choice(sizes if rng.random() < 0.95 else (0,))
        for name in names
    }


def _replica_racks(rng: random.Random, topics: dict[str, int]) -> dict[str, tuple[frozenset[str], ...]]:
    mode = rng.choice(("absent", "uniform", "aligned", "random", "random", "random"))
    if mode == "absent":
        return {}
    racks: dict[str, tuple[frozenset[str], ...]] = {}
    for topic, count in topics.items():
        if rng.random() < 0.1:
            continue  # this topic alone has no replica racks
        if mode == "uniform":
            per_partition = [frozenset(RACKS)] * count
        elif mode == "aligned":
            per_partition = [frozenset({RACKS[p % len(RACKS)]}) for p in range(count)]
        else:
            per_partition = [
                frozenset()
                if rng.random() < 0.05
                else frozenset(rng.sample((*RACKS, "r4"), rng.randint(1, 3)))
                for _ in range(count)
            ]
        racks[topic] = tuple(per_partition)
    return racks


def _missing(rng: random.Random, topics: dict[str, int]) -> list[str]:
    """Topics not in `topics` for this group: unused names of the pool and names never used."""
    pool = [name for name in (*TOPIC_NAMES, *MISSING_TOPIC_NAMES) if name not in topics]
    return rng.sample(pool, rng.randint(1, 3))


def _previous_topics(rng: random.Random, topics: dict[str, int], missing: list[str]) -> dict[str, int]:
    """The partition counts the previous assignment was made with: sometimes a topic since
    deleted (now missing), sometimes a topic since recreated with fewer partitions."""
    previous = dict(topics)
    if missing and rng.random() < 0.3:
        for name in rng.sample(missing, rng.randint(1, len(missing))):
            previous[name] = rng.randint(1, 6)
    if rng.random() < 0.12:
        shrunk = rng.choice(list(topics))
        previous[shrunk] = topics[shrunk] + rng.randint(1, 4)
    return previous


def _previous(
    rng: random.Random, topics: dict[str, int], member_ids: list[str]
) -> tuple[dict[str, list[TopicPartition]], dict[str, int | None]]:
    owned: dict[str, list[TopicPartition]] = {m: [] for m in member_ids}
    generations: dict[str, int | None] = dict.fromkeys(member_ids)
    if rng.random() < 0.2:
        return owned, generations
    current = rng.randint(1, 9)
    owners = [m for m in member_ids if rng.random() < 0.8] or member_ids[:1]
    for member in member_ids:
        roll = rng.random()
        generations[member] = current if roll < 0.7 else (current - 1 if roll < 0.85 else None)
    conflicts = rng.random() < 0.3
    for topic, count in topics.items():
        for partition in range(count):
            if rng.random() < 0.8:
                first = rng.choice(owners)
                owned[first].append(TopicPartition(topic, partition))
                if conflicts and rng.random() < 0.15:
                    second = rng.choice(owners)
                    if second != first:
                        owned[second].append(TopicPartition(topic, partition))
    for partitions in owned.values():
        rng.shuffle(partitions)
    return owned, generations


def random_group(rng: random.Random) -> GroupInput:
    """One random group (see the module docstring for what it covers)."""
    large = rng.random() < 0.1
    topics = _topics(rng, large)
    names = list(topics)
    missing = _missing(rng, topics) if rng.random() < 0.35 else []
    member_count = rng.randint(1, 16 if large else 7)
    taken_ids: set[str] = set()
    member_ids = [_unique(rng, MEMBER_NAMES, taken_ids) for _ in range(member_count)]
    static_share = rng.choice((0.0, 0.0, 0.5, 1.0))
    taken_instances: set[str] = set()
    rack_share = rng.choice((0.0, 0.5, 0.8, 1.0))
    equal = rng.random() < 0.45
    shared = frozenset(names if rng.random() < 0.7 else rng.sample(names, rng.randint(1, len(names))))
    if missing and rng.random() < 0.5:
        shared |= frozenset(rng.sample(missing, rng.randint(1, len(missing))))
    owned, generations = _previous(rng, _previous_topics(rng, topics, missing), member_ids)
    members: list[Member] = []
    for member_id in member_ids:
        if equal:
            subscribed = shared
        elif rng.random() < 0.04:
            subscribed = frozenset()
        else:
            subscribed = frozenset(rng.sample(names, rng.randint(1, len(names))))
            if missing and rng.random() < 0.4:
                subscribed |= frozenset(rng.sample(missing, rng.randint(1, len(missing))))
        rack: str | None = None
        if rng.random() < rack_share:
            rack = rng.choice((*RACKS, *RACKS, "", "r9"))
        members.append(
            Member(
                member_id=MemberId(member_id),
                topics=subscribed,
                group_instance_id=_unique(rng, INSTANCE_NAMES, taken_instances)
                if rng.random() < static_share
                else None,
                owned=tuple(owned[member_id]),
                generation=generations[member_id],
                rack=rack,
            )
        )
    rng.shuffle(members)
    racks = _replica_racks(rng, topics) if rack_share > 0 or rng.random() < 0.2 else {}
    return GroupInput(topics=topics, members=tuple(members), partition_racks=racks)


def random_groups(seed: int, count: int) -> list[GroupInput]:
    """`count` groups from one seeded generator: the same list for the same seed, every run."""
    rng = random.Random(seed)
    return [random_group(rng) for _ in range(count)]
