"""Shared builders and Hypothesis strategies for the sticky and cooperative-sticky tests.

Groups are small (a few topics of up to 8 partitions, up to 7 members) so each example runs in
milliseconds; sizes are bounded, owned partitions, generations, racks and member-id spellings
vary as Kafka's differential cases do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from hypothesis import strategies as st

from groupops.model import Assignment, GroupInput, Member, MemberId, TopicPartition

TOPICS = ("t0", "t1", "t2", "t3")
IDS = ("a", "b", "B", "C0", "C1", "consumer-1", "consumer-10", "consumer-2", "m", "Zz")
RACKS = ("r1", "r2", "r3")


def member(
    member_id: str,
    topics: Iterable[str],
    owned: Iterable[tuple[str, int]] = (),
    generation: int | None = None,
    rack: str | None = None,
) -> Member:
    return Member(
        member_id=MemberId(member_id),
        topics=frozenset(topics),
        owned=tuple(TopicPartition(t, p) for t, p in owned),
        generation=generation,
        rack=rack,
    )


def group(
    topics: Mapping[str, int],
    members: Sequence[Member],
    partition_racks: Mapping[str, Sequence[frozenset[str]]] | None = None,
) -> GroupInput:
    return GroupInput(
        topics=dict(topics), members=tuple(members), partition_racks=dict(partition_racks or {})
    )


def names(assignment: Assignment) -> dict[str, list[str]]:
    """{member: ["t0p0", ...]}: assignments as Kafka's docs write them."""
    return {m: [f"{tp.topic}p{tp.partition}" for tp in tps] for m, tps in assignment.items()}


def owning(previous: GroupInput, assignment: Assignment, generation: int) -> GroupInput:
    """The next rebalance: every member owns what `assignment` gave it, in `generation`."""
    members = [
        Member(
            member_id=m.member_id,
            topics=m.topics,
            owned=tuple(assignment[m.member_id]),
            generation=generation,
            rack=m.rack,
        )
        for m in previous.members
    ]
    return GroupInput(
        topics=previous.topics, members=tuple(members), partition_racks=previous.partition_racks
    )


@st.composite
def groups(
    draw: st.DrawFn,
    *,
    equal: bool | None = None,
    owned: bool = True,
    racks: bool = True,
    conflicts: bool = True,
) -> GroupInput:
    """A random group. `equal`: all members subscribe alike (None: either). `owned`: members
    may own partitions with generations. `conflicts`: owned partitions may be claimed twice
    and may lie outside the member's subscription (stale state)."""
    topic_count = draw(st.integers(1, len(TOPICS)))
    topics = {t: draw(st.integers(0, 8)) for t in TOPICS[:topic_count]}
    ids = draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=7, unique=True))
    same = draw(st.booleans()) if equal is None else equal
    subscription = st.frozensets(st.sampled_from(list(topics)), min_size=1)
    shared = draw(subscription)
    partitions = [(t, p) for t, count in topics.items() for p in range(count)]
    with_racks = racks and draw(st.booleans())
    partition_racks = {}
    if with_racks:
        rack_sets = st.frozensets(st.sampled_from(RACKS), max_size=2)
        partition_racks = {t: draw(st.lists(rack_sets, min_size=c, max_size=c)) for t, c in topics.items()}
    unclaimed = list(partitions)
    members = []
    for member_id in ids:
        subscribed = shared if same else draw(subscription)
        claims: list[tuple[str, int]] = []
        if owned and partitions:
            pool = partitions if conflicts else [tp for tp in unclaimed if tp[0] in subscribed]
            if pool:
                claims = draw(st.lists(st.sampled_from(pool), max_size=5, unique=True))
            unclaimed = [tp for tp in unclaimed if tp not in claims]
        generation = draw(st.sampled_from([1, 2, 3])) if claims else draw(st.sampled_from([None, None, 2]))
        if not conflicts and claims:
            generation = 2
        rack = draw(st.sampled_from([None, *RACKS])) if with_racks else None
        members.append(member(member_id, subscribed, claims, generation, rack))
    return group(topics, members, partition_racks)
