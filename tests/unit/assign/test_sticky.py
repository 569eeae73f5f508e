"""`sticky`: Kafka's StickyAssignor, on Kafka's documented examples and on random groups.

Every expected assignment below was checked against kafka-clients 4.3.1's StickyAssignor.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from groupops.assign import get_strategy
from groupops.assign.invariants import check_assignment
from groupops.assign.java_compat import JavaHashSet, java_hashmap_order, java_string_hash
from groupops.model import Assignment, GroupInput, MemberId, TopicPartition
from tests.unit.assign.sticky_groups import group, groups, member, names, owning

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FOUR_TOPICS = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}


def sticky(g: GroupInput) -> Assignment:
    assignment = get_strategy("sticky")(g)
    check_assignment(g, assignment)
    return assignment


class TestKafkaJavadocExamples:
    def test_example_1_three_members_four_topics(self) -> None:
        g = group(FOUR_TOPICS, [member(m, FOUR_TOPICS) for m in ("C0", "C1", "C2")])
        assert names(sticky(g)) == {
            "C0": ["t0p0", "t1p1", "t3p0"],
            "C1": ["t0p1", "t2p0", "t3p1"],
            "C2": ["t1p0", "t2p1"],
        }

    def test_example_1_when_c1_leaves_everything_else_stays(self) -> None:
        first = sticky(group(FOUR_TOPICS, [member(m, FOUR_TOPICS) for m in ("C0", "C1", "C2")]))
        g = group(
            FOUR_TOPICS,
            [member(m, FOUR_TOPICS, first[MemberId(m)], generation=1) for m in ("C0", "C2")],
        )
        after = sticky(g)
        for m in ("C0", "C2"):
            assert set(first[MemberId(m)]) <= set(after[MemberId(m)])
        # Kafka 4.x (the javadoc predates its equal-subscription algorithm, which hands C1's
        # partitions out round robin in partition order rather than as the javadoc shows).
        assert names(after) == {
            "C0": ["t0p0", "t0p1", "t1p1", "t3p0"],
            "C2": ["t1p0", "t2p0", "t2p1", "t3p1"],
        }

    def test_example_2_unequal_subscriptions(self) -> None:
        topics = {"t0": 1, "t1": 2, "t2": 3}
        g = group(
            topics, [member("C0", ["t0"]), member("C1", ["t0", "t1"]), member("C2", ["t0", "t1", "t2"])]
        )
        assert names(sticky(g)) == {"C0": ["t0p0"], "C1": ["t1p0", "t1p1"], "C2": ["t2p0", "t2p1", "t2p2"]}

    def test_example_2_when_c0_leaves_five_partitions_stay(self) -> None:
        topics = {"t0": 1, "t1": 2, "t2": 3}
        owned = {"C1": [("t1", 0), ("t1", 1)], "C2": [("t2", 0), ("t2", 1), ("t2", 2)]}
        g = group(
            topics,
            [member("C1", ["t0", "t1"], owned["C1"], 1), member("C2", ["t0", "t1", "t2"], owned["C2"], 1)],
        )
        assert names(sticky(g)) == {"C1": ["t0p0", "t1p0", "t1p1"], "C2": ["t2p0", "t2p1", "t2p2"]}


class TestOwnership:
    def test_a_member_leaving_moves_only_its_own_partitions(self) -> None:
        topics = {"orders": 12, "refunds": 5}
        ids = ["consumer-1", "consumer-2", "consumer-3", "consumer-4"]
        first = sticky(group(topics, [member(m, topics) for m in ids]))
        g = group(
            topics, [member(m, topics, first[MemberId(m)], generation=1) for m in ids if m != "consumer-3"]
        )
        after = sticky(g)
        for m in ids:
            if m != "consumer-3":
                assert set(first[MemberId(m)]) <= set(after[MemberId(m)])
        sizes = sorted(len(v) for v in after.values())
        assert sizes[-1] - sizes[0] <= 1

    def test_a_member_joining_takes_the_surplus_in_partition_order(self) -> None:
        g = group({"t0": 4}, [member("C0", ["t0"], [("t0", p) for p in range(4)], 1), member("C1", ["t0"])])
        assert names(sticky(g)) == {"C0": ["t0p0", "t0p1"], "C1": ["t0p2", "t0p3"]}

    def test_a_partition_claimed_twice_goes_to_the_higher_generation(self) -> None:
        g = group(
            {"t0": 4},
            [member("A", ["t0"], [("t0", 0), ("t0", 1)], 3), member("B", ["t0"], [("t0", 1), ("t0", 2)], 4)],
        )
        assert names(sticky(g)) == {"A": ["t0p0", "t0p3"], "B": ["t0p1", "t0p2"]}

    def test_a_partition_claimed_twice_in_one_generation_is_owned_by_nobody(self) -> None:
        # Kafka treats it as corrupt state: neither claimant keeps it; here C takes it.
        g = group(
            {"t0": 4},
            [
                member("A", ["t0"], [("t0", 0), ("t0", 1)], 3),
                member("B", ["t0"], [("t0", 1), ("t0", 2)], 3),
                member("C", ["t0"]),
            ],
        )
        assert names(sticky(g)) == {"A": ["t0p0", "t0p3"], "B": ["t0p2"], "C": ["t0p1"]}

    def test_unequal_subscriptions_keep_owned_partitions_of_subscribed_topics(self) -> None:
        topics = {"t0": 3, "t1": 3}
        everything = [("t0", p) for p in range(3)] + [("t1", p) for p in range(3)]
        g = group(topics, [member("A", ["t0", "t1"], everything, 5), member("B", ["t1"])])
        assert names(sticky(g)) == {"A": ["t0p0", "t0p1", "t0p2"], "B": ["t1p0", "t1p1", "t1p2"]}

    def test_an_older_owner_that_dropped_the_topic_is_handed_back_then_relieved_as_kafka_does(self) -> None:
        # Kafka moves t1p0 back to c (older generation, no longer subscribed to t1) and later on to
        # consumer-2; the end result is valid and is Kafka's.
        g = group(
            {"t0": 3, "t1": 3},
            [
                member("c", ["t0"], [("t1", 2), ("t1", 1), ("t1", 0), ("t0", 0)], 1),
                member("C1", ["t0", "t1"]),
                member("e", ["t1"], generation=2),
                member("consumer-2", ["t1"], generation=2),
                member("f", ["t1"], [("t1", 1), ("t1", 0), ("t0", 0), ("t1", 2), ("t0", 1)], 3),
                member("consumer-1", ["t1"]),
                member("Zz", ["t0", "t1"], generation=2),
            ],
        )
        assert names(sticky(g)) == {
            "c": ["t0p2"],
            "C1": ["t0p0"],
            "e": [],
            "consumer-2": ["t1p0"],
            "f": ["t1p2"],
            "consumer-1": ["t1p1"],
            "Zz": ["t0p1"],
        }

    def test_where_kafka_would_give_a_partition_to_a_non_subscriber_the_answer_stays_valid(self) -> None:
        # Kafka answers C2 [t1p0] although C2 subscribes to t0 only; ours rebalances without that.
        g = group(
            {"t0": 1, "t1": 1, "t2": 1},
            [
                member("C0", ["t0", "t1"]),
                member("C1", ["t0", "t1", "t2"], [("t0", 0), ("t1", 0)], 1),
                member("C2", ["t0"], [("t0", 0), ("t1", 0)]),
            ],
        )
        assert names(sticky(g)) == {"C0": ["t1p0"], "C1": ["t2p0"], "C2": ["t0p0"]}

    def test_member_ids_order_as_java_strings_and_instance_ids_do_not_matter(self) -> None:
        # "B" < "a" and "consumer-10" < "consumer-2" in Java; sticky orders by member id only.
        g = GroupInput(
            topics={"t0": 4},
            members=(
                member("consumer-2", ["t0"]),
                member("consumer-10", ["t0"]),
                member("a", ["t0"]),
                member("B", ["t0"]),
            ),
        )
        assert names(sticky(g)) == {
            "consumer-2": ["t0p3"],
            "consumer-10": ["t0p2"],
            "a": ["t0p1"],
            "B": ["t0p0"],
        }


class TestRackAwareness:
    RACKS = ("r1", "r2", "r3", "r1", "r2", "r3")

    def test_partitions_go_to_members_in_a_replica_rack(self) -> None:
        g = group(
            {"t0": 6},
            [member("a", ["t0"], rack="r1"), member("b", ["t0"], rack="r2"), member("c", ["t0"], rack="r3")],
            {"t0": [frozenset([r]) for r in self.RACKS]},
        )
        assert names(sticky(g)) == {"a": ["t0p0", "t0p3"], "b": ["t0p1", "t0p4"], "c": ["t0p2", "t0p5"]}

    def test_owned_partitions_outside_the_members_rack_move_to_their_rack(self) -> None:
        g = group(
            {"t0": 6},
            [
                member("a", ["t0"], [("t0", 0), ("t0", 1), ("t0", 2)], 2, rack="r1"),
                member("b", ["t0"], [("t0", 3), ("t0", 4), ("t0", 5)], 2, rack="r2"),
            ],
            {"t0": [frozenset([r]) for r in ("r1", "r2", "r1", "r2", "r1", "r2")]},
        )
        assert names(sticky(g)) == {"a": ["t0p0", "t0p2", "t0p4"], "b": ["t0p1", "t0p3", "t0p5"]}


class TestJavaCollectionOrder:
    """The orders of java.util.HashMap/HashSet that Kafka's answer depends on (values from Java 17)."""

    @pytest.mark.parametrize(
        ("keys", "java_order"),
        [
            pytest.param(
                ["consumer-1", "consumer-2", "consumer-10", "a", "B", "C0"],
                ["a", "B", "consumer-10", "consumer-2", "consumer-1", "C0"],
                id="small-table",
            ),
            pytest.param(
                [f"m{i}" for i in range(20)],
                [f"m{i}" for i in (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 10, 13, 12, 15, 14, 17, 16, 19, 18)],
                id="resized-table",
            ),
            pytest.param(
                [
                    "x",
                    "AaAaAaAa",
                    "BBAaAaAa",
                    "q",
                    "AaBBAaAa",
                    "BBBBAaAa",
                    "AaAaBBAa",
                    "BBAaBBAa",
                    "AaBBBBAa",
                    "BBBBBBAa",
                    "AaAaAaBB",
                    "r",
                    "s",
                ],
                [
                    "AaAaAaAa",
                    "BBAaAaAa",
                    "AaBBAaAa",
                    "BBBBAaAa",
                    "AaAaBBAa",
                    "BBAaBBAa",
                    "AaBBBBAa",
                    "BBBBBBAa",
                    "AaAaAaBB",
                    "q",
                    "r",
                    "s",
                    "x",
                ],
                id="nine-equal-hashes-grow-the-table",
            ),
        ],
    )
    def test_hashmap_iteration(self, keys: list[str], java_order: list[str]) -> None:
        order = java_hashmap_order([java_string_hash(k) for k in keys])
        assert [keys[i] for i in order.order] == java_order
        assert not order.treeified

    def test_string_hash_counts_utf16_code_units(self) -> None:
        assert java_string_hash("hello") == 99162322
        assert java_string_hash("consumer-10") == -858448042
        assert java_string_hash("\U0001f600z") == 54959991

    def test_hashset_first_element(self) -> None:
        keys = [f"topic-{p}" for p in (5, 21, 37, 3, 19)]
        s: JavaHashSet[str] = JavaHashSet()
        for k in keys:
            s.add(k, java_string_hash(k))
        assert s.first() == "topic-37"


def counts(assignment: Assignment) -> list[int]:
    return sorted(len(v) for v in assignment.values())


@SETTINGS
@given(g=groups())
def test_every_subscribed_partition_once_to_a_subscriber(g: GroupInput) -> None:
    sticky(g)


@SETTINGS
@given(g=groups())
def test_same_group_same_answer(g: GroupInput) -> None:
    assert sticky(g) == sticky(g)
    reversed_members = GroupInput(topics=g.topics, members=g.members[::-1], partition_racks=g.partition_racks)
    assert sticky(reversed_members) == sticky(g)


@SETTINGS
@given(g=groups(equal=True))
def test_equal_subscriptions_give_counts_within_one(g: GroupInput) -> None:
    sizes = counts(sticky(g))
    assert sizes[-1] - sizes[0] <= 1


@SETTINGS
@given(g=groups(equal=True, racks=False, conflicts=False))
def test_equal_subscriptions_keep_owned_partitions_up_to_the_quota(g: GroupInput) -> None:
    assignment = sticky(g)
    total = sum(g.topics[t] for t in g.subscribed_topics())
    min_quota = total // len(g.members)
    for m in g.members:
        kept = set(m.owned) & set(assignment[m.member_id])
        assert len(kept) >= min(len(m.owned), min_quota), m.member_id


@SETTINGS
@given(g=groups(owned=False))
def test_unequal_subscriptions_leave_no_partition_that_could_even_out(g: GroupInput) -> None:
    """Kafka's balance: no partition could move to a subscriber holding two or more fewer."""
    assignment = sticky(g)
    by_id = {m.member_id: m for m in g.members}
    for giver, theirs in assignment.items():
        for taker, mine in assignment.items():
            if len(theirs) >= len(mine) + 2:
                assert not any(tp.topic in by_id[taker].topics for tp in theirs), (giver, taker)


@SETTINGS
@given(g=groups(owned=False, racks=False))
def test_a_stable_group_keeps_its_assignment(g: GroupInput) -> None:
    # Not with racks: KIP-881 gives up an owned partition with no replica in the member's rack.
    first = sticky(g)
    assert sticky(owning(g, first, 1)) == first


@SETTINGS
@given(g=groups(equal=True, racks=False, conflicts=False))
def test_a_member_below_the_ceiling_keeps_everything_it_owned(g: GroupInput) -> None:
    """With equal subscriptions, owning fewer than ceil(P / N) partitions means keeping them all."""
    assignment = sticky(g)
    total = sum(g.topics[t] for t in g.subscribed_topics())
    ceiling = -(-total // len(g.members))
    for m in g.members:
        if len(m.owned) < ceiling:
            assert set(m.owned) <= set(assignment[m.member_id]), m.member_id


def test_topics_nobody_subscribes_to_are_not_assigned() -> None:
    g = group({"t0": 2, "other": 3}, [member("a", ["t0"], [("other", 0)], 1), member("b", ["t0"])])
    assignment = sticky(g)
    assert all(tp.topic == "t0" for tps in assignment.values() for tp in tps)
    assert sorted(tp for tps in assignment.values() for tp in tps) == [
        TopicPartition("t0", 0),
        TopicPartition("t0", 1),
    ]
