"""Properties every registered strategy keeps, on random groups (hypothesis).

For every name in `STRATEGY_NAMES`: each subscribed partition assigned once and only to a
subscriber (cooperative-sticky: or held back while it changes owner), the same answer for the same
group whatever the order of its members, and no move when a group is fed its own answer. Balance
bounds where a strategy promises them, and `balanced`'s own promises: decreasingly minimal counts
(checked against an independent reference), never worse than `lag` when `lag` is count-balanced,
the move cap.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from groupops.assign import STRATEGY_NAMES, get_strategy
from groupops.assign.invariants import check_assignment
from groupops.assign.stats import compute_stats
from groupops.model import Assignment, AssignOptions, GroupInput, Member, MemberId, TopicPartition
from tests.unit.assign.test_cooperative_sticky import KAFKA_MAX_FOLLOW_UPS

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Prefixes that Java and Python order differently from naive expectations: "B" < "a", "C10" < "C2".
ID_PREFIXES = ["C", "c", "B", "consumer", "C1"]


@st.composite
def groups(draw: st.DrawFn, *, equal_subscriptions: bool | None = None, with_cap: bool = True) -> GroupInput:
    topic_count = draw(st.integers(1, 4))
    topics = {f"t{i}": draw(st.integers(0, 7)) for i in range(topic_count)}
    partitions = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    equal = draw(st.booleans()) if equal_subscriptions is None else equal_subscriptions
    shared = sorted(topics) if equal else None
    member_count = draw(st.integers(1, 6))
    ids = draw(
        st.lists(
            st.tuples(st.sampled_from(ID_PREFIXES), st.integers(0, 30)).map(lambda p: f"{p[0]}{p[1]}"),
            min_size=member_count,
            max_size=member_count,
            unique=True,
        )
    )
    members = []
    for index, member_id in enumerate(ids):
        subscribed = (
            shared if shared is not None else draw(st.lists(st.sampled_from(sorted(topics)), unique=True))
        )
        owned = draw(st.lists(st.sampled_from(partitions), unique=True, max_size=5)) if partitions else []
        members.append(
            Member(
                member_id=MemberId(member_id),
                topics=frozenset(subscribed),
                group_instance_id=f"i{index}" if draw(st.booleans()) else None,
                owned=tuple(owned),
                generation=draw(st.none() | st.integers(1, 3)),
                capacity=draw(st.sampled_from([1.0, 1.0, 1.0, 0.5, 2.0, 3.0])),
                priority=draw(st.integers(0, 3)),
            )
        )
    lags = {t: draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n)) for t, n in topics.items()}
    max_moves = draw(st.none() | st.integers(0, 4)) if with_cap else None
    return GroupInput(
        topics=topics, members=tuple(members), lags=lags, options=AssignOptions(max_moves=max_moves)
    )


def counts(group: GroupInput, assignment: Assignment) -> dict[str, int]:
    return {m.member_id: len(assignment[m.member_id]) for m in group.members}


def fed_back(group: GroupInput, assignment: Assignment) -> GroupInput:
    """The same group, every member owning what `assignment` gave it, one generation later."""
    generation = max((m.generation or 0 for m in group.members), default=0) + 1
    members = tuple(
        Member(
            member_id=m.member_id,
            topics=m.topics,
            group_instance_id=m.group_instance_id,
            owned=tuple(assignment[m.member_id]),
            generation=generation,
            capacity=m.capacity,
            priority=m.priority,
        )
        for m in group.members
    )
    return GroupInput(topics=group.topics, members=members, lags=group.lags, options=group.options)


def reference_balanced_counts(group: GroupInput) -> list[int]:
    """Sorted decreasingly minimal count vector, computed independently of the engine: any
    feasible assignment, then one partition at a time along a hand-over chain from a member with
    c partitions to one with c - 2 or fewer, until there is none."""
    holder: dict[TopicPartition, str] = {}
    subscribers = {t: [str(m.member_id) for m in group.members if t in m.topics] for t in group.topics}
    for topic in group.subscribed_topics():
        for p in range(group.topics[topic]):
            holder[TopicPartition(topic, p)] = subscribers[topic][0]
    while True:
        load = {str(m.member_id): 0 for m in group.members}
        for owner in holder.values():
            load[owner] += 1
        chain = _improving_chain(group, holder, load, subscribers)
        if chain is None:
            return sorted(load.values())
        for tp, taker in chain:
            holder[tp] = taker


def _improving_chain(
    group: GroupInput,
    holder: dict[TopicPartition, str],
    load: dict[str, int],
    subscribers: dict[str, list[str]],
) -> list[tuple[TopicPartition, str]] | None:
    for source in sorted(load, key=lambda m: -load[m]):
        parent: dict[str, tuple[TopicPartition, str]] = {}
        queue = deque([source])
        seen = {source}
        while queue:
            giver = queue.popleft()
            for tp, owner in holder.items():
                if owner != giver:
                    continue
                for taker in subscribers[tp.topic]:
                    if taker in seen:
                        continue
                    seen.add(taker)
                    parent[taker] = (tp, giver)
                    if load[taker] <= load[source] - 2:
                        chain = []
                        node = taker
                        while node != source:
                            tp_moved, previous = parent[node]
                            chain.append((tp_moved, node))
                            node = previous
                        return chain
                    queue.append(taker)
    return None


def run(name: str, group: GroupInput) -> Assignment:
    return get_strategy(name)(group)


@pytest.mark.parametrize("name", STRATEGY_NAMES)
class TestEveryStrategy:
    @SETTINGS
    @given(group=groups())
    def test_each_subscribed_partition_once_and_only_to_a_subscriber(
        self, name: str, group: GroupInput
    ) -> None:
        check_assignment(group, run(name, group), may_leave_moving_unassigned=name == "cooperative-sticky")

    @SETTINGS
    @given(group=groups(), data=st.data())
    def test_same_group_same_answer_whatever_the_member_order(
        self, name: str, group: GroupInput, data: st.DataObject
    ) -> None:
        first = run(name, group)
        assert run(name, group) == first
        shuffled = data.draw(st.permutations(group.members))
        reordered = GroupInput(
            topics=group.topics, members=tuple(shuffled), lags=group.lags, options=group.options
        )
        assert run(name, reordered) == first

    @SETTINGS
    @given(group=groups(with_cap=False))
    def test_fed_its_own_answer_nothing_moves(self, name: str, group: GroupInput) -> None:
        answer = run(name, group)
        if name == "cooperative-sticky":
            # Its first answers withhold partitions that change owner, and with unequal
            # subscriptions the sticky target can move while they are handed out (Kafka's too):
            # its own answer is the one it reaches after Kafka's follow-up rebalances.
            for _ in range(KAFKA_MAX_FOLLOW_UPS):
                group = fed_back(group, answer)
                answer = run(name, group)
        again = fed_back(group, answer)
        assert compute_stats(again, run(name, again))["moves"] == 0


@pytest.mark.parametrize("name", ["range", "lag"])
@SETTINGS
@given(group=groups())
def test_per_topic_strategies_balance_each_topic(name: str, group: GroupInput) -> None:
    """Counts within one per topic; `lag` per capacity (D'Hondt): no subscriber holds more
    partitions per capacity than another would after taking one more. With equal capacities
    that is "within one"; `range` ignores capacity."""
    assignment = run(name, group)
    for topic in group.subscribed_topics():
        subscribers = [m for m in group.members if topic in m.topics]
        held = {m.member_id: sum(tp.topic == topic for tp in assignment[m.member_id]) for m in subscribers}
        if name == "range":
            assert max(held.values()) - min(held.values()) <= 1
            continue
        for a in subscribers:
            for b in subscribers:
                assert held[a.member_id] / a.capacity <= (held[b.member_id] + 1) / b.capacity * (1 + 1e-12)


@pytest.mark.parametrize("name", ["roundrobin", "sticky", "balanced"])
@SETTINGS
@given(group=groups(equal_subscriptions=True))
def test_equal_subscriptions_give_counts_within_one(name: str, group: GroupInput) -> None:
    values = list(counts(group, run(name, group)).values())
    assert max(values) - min(values) <= 1


@SETTINGS
@given(group=groups(equal_subscriptions=False))
def test_sticky_is_balanced_as_kafka_defines_it(group: GroupInput) -> None:
    """No partition could move from a member to a subscriber holding two or more fewer."""
    assignment = run("sticky", group)
    by_id = {m.member_id: m for m in group.members}
    for giver, tps in assignment.items():
        for taker, theirs in assignment.items():
            if len(tps) >= len(theirs) + 2:
                assert not any(tp.topic in by_id[taker].topics for tp in tps), (giver, taker)


@SETTINGS
@given(group=groups())
def test_failover_gives_each_topic_to_one_member(group: GroupInput) -> None:
    assignment = run("failover", group)
    for topic in group.subscribed_topics():
        holders = {m for m, tps in assignment.items() for tp in tps if tp.topic == topic}
        assert len(holders) == (1 if group.topics[topic] else 0)


@SETTINGS
@given(group=groups())
def test_balanced_counts_are_decreasingly_minimal(group: GroupInput) -> None:
    assert sorted(counts(group, run("balanced", group)).values()) == reference_balanced_counts(group)


@SETTINGS
@given(group=groups(with_cap=False))
def test_balanced_never_worse_than_lag_when_lag_is_count_balanced(group: GroupInput) -> None:
    lagged = run("lag", group)
    ours = compute_stats(group, run("balanced", group))["max_member_lag"]
    if sorted(counts(group, lagged).values()) == reference_balanced_counts(group):
        assert ours <= compute_stats(group, lagged)["max_member_lag"]


@SETTINGS
@given(group=groups(equal_subscriptions=True, with_cap=False))
def test_balanced_never_worse_than_lag_on_one_topic(group: GroupInput) -> None:
    """One topic: with equal capacities lag's per-topic balance is count balance, so lag is
    always a candidate; with unequal ones lag gives the faster members more partitions, and
    `balanced` promises to match it only when its answer is count-balanced anyway."""
    first = sorted(group.topics)[0]
    one = GroupInput(
        topics={first: group.topics[first]},
        members=tuple(
            Member(member_id=m.member_id, topics=frozenset([first]), capacity=m.capacity, owned=())
            for m in group.members
        ),
        lags={first: group.lags[first]},
    )
    lagged = run("lag", one)
    held = [len(tps) for tps in lagged.values()]
    assume(max(held) - min(held) <= 1)
    ours = compute_stats(one, run("balanced", one))["max_member_lag"]
    assert ours <= compute_stats(one, lagged)["max_member_lag"]


@SETTINGS
@given(group=groups())
def test_balanced_move_cap_binds_beyond_forced_moves(group: GroupInput) -> None:
    """At most max_moves moves, unless count balance forces more (then no more than with a cap
    of zero, which makes only the forced ones)."""
    cap = group.options.max_moves
    moves = compute_stats(group, run("balanced", group))["moves"]
    if cap is not None:
        frozen = GroupInput(
            topics=group.topics, members=group.members, lags=group.lags, options=AssignOptions(max_moves=0)
        )
        forced = compute_stats(frozen, run("balanced", frozen))["moves"]
        assert moves <= max(cap, forced)


@SETTINGS
@given(group=groups())
def test_balanced_under_a_cap_keeps_improving_call_after_call(group: GroupInput) -> None:
    """A binding cap leaves work for the next call: fed its own answer, `balanced` moves at most
    the cap again (nothing is forced any more) and the max lag never rises."""
    first = run("balanced", group)
    again = fed_back(group, first)
    second = run("balanced", again)
    stats = compute_stats(again, second)
    if group.options.max_moves is not None:
        assert stats["moves"] <= group.options.max_moves
    assert stats["max_member_lag"] <= compute_stats(again, first)["max_member_lag"]
