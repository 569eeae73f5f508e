"""Topics out of step with the metadata: every strategy gives Kafka's answer.

Members report subscriptions and owned partitions that can lag behind the cluster: a topic not
created yet or deleted, a topic recreated with fewer partitions. Kafka's assignors only see the
subscribed topics the leader's metadata holds, so (docs/design.md §3.3):
- a subscription to a topic not in `topics` gets nothing from it;
- an owned partition of a topic not in `topics`, or beyond its topic's count, is dropped: it goes
  to nobody, and `stats` counts it as a revoked move (`dropped` says how many of `moves`).

The scenarios are Apache Kafka's own (RangeAssignorTest, RoundRobinAssignorTest,
AbstractStickyAssignorTest: nonexistent topic, assignment updated for a deleted topic, only
subscribed topic deleted, owned partitions of topics no longer in the metadata, a topic removed
between rebalances), with our own data. The expected answers of range, roundrobin, sticky and
cooperative-sticky were checked against kafka-clients 4.3.1; tests/differential runs the same
groups through Kafka's classes on every run. `lag` follows the seed (shared/seeds/000): its
assignor skips a topic "since no metadata is available".
"""

from __future__ import annotations

import pytest

from groupops.assign import STRATEGY_NAMES, get_strategy
from groupops.assign.invariants import check_assignment
from groupops.assign.stats import compute_stats
from groupops.model import Assignment, AssignOptions, GroupInput, Member, MemberId, TopicPartition
from tests.unit.assign.out_of_step_groups import (
    MISSING_AMONG_EXISTING,
    ONLY_MISSING,
    ONLY_SUBSCRIBED_TOPIC_DELETED,
    OWNED_OF_DELETED_TOPIC,
    RECREATED_WITH_FEWER_PARTITIONS,
    STALE_CLAIM_OF_AN_UNSUBSCRIBED_TOPIC,
    TOPIC_REMOVED_BETWEEN_REBALANCES,
)
from tests.unit.assign.sticky_groups import group, member, names


def run(strategy: str, g: GroupInput) -> Assignment:
    assignment = get_strategy(strategy)(g)
    check_assignment(g, assignment, may_leave_moving_unassigned=strategy == "cooperative-sticky")
    return assignment


def with_lags(g: GroupInput, lags: dict[str, list[int]]) -> GroupInput:
    return GroupInput(topics=g.topics, members=g.members, lags=lags, options=g.options)


class TestSubscriptionToAMissingTopic:
    @pytest.mark.parametrize("strategy", STRATEGY_NAMES)
    def test_a_member_subscribed_only_to_a_missing_topic_gets_nothing(self, strategy: str) -> None:
        assignment = run(strategy, ONLY_MISSING)
        assert assignment[MemberId("w1")] == []
        assert names(assignment)["w2"] == ["paymentsp0", "paymentsp1", "paymentsp2", "paymentsp3"]

    @pytest.mark.parametrize("strategy", STRATEGY_NAMES)
    def test_the_existing_topics_of_a_subscription_are_assigned_as_usual(self, strategy: str) -> None:
        # Kafka's testAssignmentUpdatedForDeletedTopic: 1 + 6 partitions, the missing topic none.
        assignment = run(strategy, MISSING_AMONG_EXISTING)
        assert len(assignment[MemberId("w1")]) == 7

    def test_a_missing_topic_is_the_same_as_a_topic_without_partitions(self) -> None:
        # Kafka builds partitionsPerTopic only from topics with partitions in the metadata.
        empty = group({"payments": 4, "ledger": 0}, ONLY_MISSING.members)
        for strategy in STRATEGY_NAMES:
            assert run(strategy, empty) == run(strategy, ONLY_MISSING), strategy

    def test_lag_skips_a_topic_without_metadata_as_the_seed_does(self) -> None:
        g = with_lags(
            group({"payments": 3}, [member("C0", ["payments", "ledger"]), member("C1", ["ledger"])]),
            {"payments": [100_000, 50_000, 60_000]},
        )
        assert names(run("lag", g)) == {"C0": ["paymentsp0", "paymentsp1", "paymentsp2"], "C1": []}

    def test_stats_name_the_missing_topics(self) -> None:
        stats = compute_stats(ONLY_MISSING, run("range", ONLY_MISSING))
        assert stats["missing_topics"] == ["ledger"]
        assert stats["unassigned"] == 0
        assert compute_stats(MISSING_AMONG_EXISTING, run("range", MISSING_AMONG_EXISTING))[
            "missing_topics"
        ] == ["ledger"]


class TestOwnedPartitionsOfADeletedTopic:
    @pytest.mark.parametrize("strategy", STRATEGY_NAMES)
    def test_are_dropped_and_count_as_revoked_moves(self, strategy: str) -> None:
        # Kafka's testOnlyAssignsPartitionsFromSubscribedTopics: the other topic's partitions go.
        assignment = run(strategy, OWNED_OF_DELETED_TOPIC)
        assert names(assignment) == {"w1": ["paymentsp0", "paymentsp1"]}
        stats = compute_stats(OWNED_OF_DELETED_TOPIC, assignment)
        assert (stats["moves"], stats["dropped"]) == (2, 2)

    @pytest.mark.parametrize("strategy", STRATEGY_NAMES)
    def test_only_subscribed_topic_deleted_leaves_an_empty_assignment(self, strategy: str) -> None:
        # Kafka's testNoExceptionThrownWhenOnlySubscribedTopicDeleted.
        assignment = run(strategy, ONLY_SUBSCRIBED_TOPIC_DELETED)
        assert assignment == {MemberId("w1"): []}
        stats = compute_stats(ONLY_SUBSCRIBED_TOPIC_DELETED, assignment)
        assert (stats["moves"], stats["dropped"], stats["missing_topics"]) == (3, 3, ["payments"])

    @pytest.mark.parametrize(
        ("strategy", "expected"),
        [
            pytest.param("range", {"w1": ["auditp0", "auditp1"], "w2": ["auditp2"]}, id="range"),
            pytest.param("roundrobin", {"w1": ["auditp0", "auditp2"], "w2": ["auditp1"]}, id="roundrobin"),
            pytest.param("sticky", {"w1": ["auditp0", "auditp2"], "w2": ["auditp1"]}, id="sticky"),
            pytest.param(
                "cooperative-sticky",
                {"w1": ["auditp0", "auditp2"], "w2": ["auditp1"]},
                id="cooperative-sticky",
            ),
        ],
    )
    def test_topic_removed_between_rebalances_matches_kafka(
        self, strategy: str, expected: dict[str, list[str]]
    ) -> None:
        assert names(run(strategy, TOPIC_REMOVED_BETWEEN_REBALANCES)) == expected

    @pytest.mark.parametrize("strategy", ["sticky", "cooperative-sticky", "balanced"])
    def test_sticky_strategies_keep_the_rest_of_what_they_own(self, strategy: str) -> None:
        # Kafka's testAddRemoveTopicTwoConsumers, last step: only the deleted topic's partitions go.
        assignment = run(strategy, TOPIC_REMOVED_BETWEEN_REBALANCES)
        for m in TOPIC_REMOVED_BETWEEN_REBALANCES.members:
            kept = [tp for tp in m.owned if tp.topic == "audit"]
            assert assignment[m.member_id] == kept
        stats = compute_stats(TOPIC_REMOVED_BETWEEN_REBALANCES, assignment)
        assert (stats["moves"], stats["dropped"]) == (3, 3)


class TestOwnedPartitionsBeyondTheTopicsCount:
    """The topic was deleted and recreated with fewer partitions; members still report the old
    numbers. Kafka filters owned partitions by topic only, so it can hand such a partition back
    (or throw, as it does here: "No more unfilled consumers to be assigned"); we drop it."""

    @pytest.mark.parametrize("strategy", STRATEGY_NAMES)
    def test_are_dropped_and_count_as_revoked_moves(self, strategy: str) -> None:
        assignment = run(strategy, RECREATED_WITH_FEWER_PARTITIONS)
        assert sorted(tp for tps in assignment.values() for tp in tps) == [
            TopicPartition("payments", p) for p in range(3)
        ]
        stats = compute_stats(RECREATED_WITH_FEWER_PARTITIONS, assignment)
        assert stats["dropped"] == 2
        assert stats["moves"] >= 2

    @pytest.mark.parametrize("strategy", ["sticky", "cooperative-sticky", "balanced"])
    def test_sticky_strategies_keep_the_partitions_that_still_exist(self, strategy: str) -> None:
        assignment = run(strategy, RECREATED_WITH_FEWER_PARTITIONS)
        assert TopicPartition("payments", 0) in assignment[MemberId("w1")]
        assert TopicPartition("payments", 1) in assignment[MemberId("w2")]
        assert compute_stats(RECREATED_WITH_FEWER_PARTITIONS, assignment)["moves"] == 2

    @pytest.mark.parametrize(
        ("strategy", "expected"),
        [
            pytest.param(
                "sticky",
                {
                    "idle": [],
                    "c1": ["paymentsp1", "paymentsp3", "paymentsp4"],
                    "c0": ["paymentsp0", "paymentsp2"],
                },
                id="sticky",
            ),
            pytest.param(
                "cooperative-sticky",
                {"idle": [], "c1": ["paymentsp1", "paymentsp3", "paymentsp4"], "c0": ["paymentsp2"]},
                id="cooperative-sticky",
            ),
        ],
    )
    def test_one_whose_owner_no_longer_subscribes_means_revocation_as_in_kafka(
        self, strategy: str, expected: dict[str, list[str]]
    ) -> None:
        # Kafka's general builder drops such a partition and notes "revocation required", which
        # skips its first balancing pass over the newly assigned partitions.
        assert names(run(strategy, STALE_CLAIM_OF_AN_UNSUBSCRIBED_TOPIC)) == expected


class TestFailoverAndBalancedOwnership:
    def test_failover_without_failback_ignores_a_partition_that_no_longer_exists(self) -> None:
        def g(owned: tuple[TopicPartition, ...]) -> GroupInput:
            return GroupInput(
                topics={"orders": 3},
                members=(
                    Member(member_id=MemberId("A"), topics=frozenset({"orders"}), priority=10, owned=owned),
                    Member(member_id=MemberId("B"), topics=frozenset({"orders"}), priority=20),
                ),
                options=AssignOptions(failback=False),
            )

        # A owned orders-7 before the topic was recreated with 3 partitions: it owns nothing now.
        assert run("failover", g((TopicPartition("orders", 7),)))[MemberId("B")] != []
        assert run("failover", g((TopicPartition("orders", 0),)))[MemberId("B")] == []

    def test_balanced_counts_dropped_partitions_against_the_move_cap(self) -> None:
        base = OWNED_OF_DELETED_TOPIC
        capped = GroupInput(topics=base.topics, members=base.members, options=AssignOptions(max_moves=0))
        assignment = run("balanced", capped)
        # The two dropped partitions are forced moves; nothing else moves.
        assert names(assignment) == {"w1": ["paymentsp0", "paymentsp1"]}
        assert compute_stats(capped, assignment)["moves"] == 2
