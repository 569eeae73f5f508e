"""`balanced`: count balance first, then the lowest max member lag per capacity, then the fewest
moves, under an optional move cap. Every case also passes the shared invariant checker."""

from __future__ import annotations

import numpy as np
import pytest

from groupops.assign import get_strategy
from groupops.assign.invariants import check_assignment
from groupops.assign.stats import compute_stats
from groupops.model import Assignment, AssignOptions, GroupInput, Member, MemberId, TopicPartition

balanced = get_strategy("balanced")
lag_strategy = get_strategy("lag")


def member(
    member_id: str,
    topics: list[str],
    *,
    capacity: float = 1.0,
    owned: list[TopicPartition] | None = None,
    generation: int | None = None,
) -> Member:
    return Member(
        member_id=MemberId(member_id),
        topics=frozenset(topics),
        capacity=capacity,
        owned=tuple(owned or ()),
        generation=generation,
    )


def names(assignment: Assignment) -> dict[str, list[str]]:
    return {m: [f"{tp.topic}p{tp.partition}" for tp in tps] for m, tps in assignment.items()}


def checked(group: GroupInput) -> Assignment:
    assignment = balanced(group)
    check_assignment(group, assignment)
    return assignment


def with_owned(group: GroupInput, assignment: Assignment, **changes: object) -> GroupInput:
    """The same group, each member owning what `assignment` gave it."""
    members = tuple(
        Member(
            member_id=m.member_id,
            topics=m.topics,
            capacity=m.capacity,
            group_instance_id=m.group_instance_id,
            owned=tuple(assignment[m.member_id]),
            generation=m.generation,
        )
        for m in group.members
    )
    fields: dict[str, object] = {
        "topics": group.topics,
        "members": members,
        "lags": group.lags,
        "options": group.options,
    }
    fields.update(changes)
    return GroupInput(**fields)  # type: ignore[arg-type]


def skewed_group(
    seed: int, *, partitions: int, members: int, topics: int = 4, zipf: bool = False
) -> GroupInput:
    rng = np.random.default_rng(seed)
    per_topic = partitions // topics
    lags = {
        f"t{t}": [int(v) for v in (rng.zipf(1.6, per_topic) if zipf else rng.lognormal(6, 1.5, per_topic))]
        for t in range(topics)
    }
    return GroupInput(
        topics=dict.fromkeys(lags, per_topic),
        members=tuple(member(f"m{i:02d}", list(lags)) for i in range(members)),
        lags=lags,
    )


class TestWorkedExamples:
    def test_docstring_example_beats_lag_and_meets_the_lower_bound(self) -> None:
        group = GroupInput(
            topics={"t0": 2, "t1": 2},
            members=(member("C0", ["t0", "t1"]), member("C1", ["t0", "t1"])),
            lags={"t0": [90, 10], "t1": [80, 20]},
        )
        assignment = checked(group)
        assert names(assignment) == {"C0": ["t0p0", "t0p1"], "C1": ["t1p0", "t1p1"]}
        stats = compute_stats(group, assignment)
        assert stats["max_member_lag"] == stats["lower_bound"] == 100
        assert compute_stats(group, lag_strategy(group))["max_member_lag"] == 170

    def test_seed_000_example_is_as_good_as_lag(self) -> None:
        group = GroupInput(
            topics={"t0": 3},
            members=(member("C0", ["t0"]), member("C1", ["t0"])),
            lags={"t0": [100_000, 50_000, 60_000]},
        )
        assert names(checked(group)) == {"C0": ["t0p0"], "C1": ["t0p1", "t0p2"]}

    def test_no_lag_is_count_balance_alone(self) -> None:
        group = GroupInput(
            topics={"t0": 7}, members=(member("a", ["t0"]), member("b", ["t0"]), member("c", ["t0"]))
        )
        counts = sorted(len(tps) for tps in checked(group).values())
        assert counts == [2, 2, 3]

    def test_every_member_present_even_without_partitions(self) -> None:
        group = GroupInput(
            topics={"t0": 1, "idle": 0},
            members=(member("a", ["t0"]), member("b", ["t0"]), member("c", ["idle"]), member("d", [])),
        )
        assignment = checked(group)
        assert set(assignment) == {"a", "b", "c", "d"}
        assert assignment[MemberId("c")] == assignment[MemberId("d")] == []


class TestCapacityWeighting:
    def test_capacity_divides_member_lag(self) -> None:
        group = GroupInput(
            topics={"t0": 2, "t1": 2},
            members=(member("C0", ["t0", "t1"]), member("C1", ["t0", "t1"], capacity=3.0)),
            lags={"t0": [90, 10], "t1": [80, 20]},
        )
        assignment = checked(group)
        assert names(assignment) == {"C0": ["t0p1", "t1p1"], "C1": ["t0p0", "t1p0"]}
        assert compute_stats(group, assignment)["max_member_lag"] == pytest.approx(170 / 3)

    def test_extra_partition_goes_where_capacity_absorbs_it(self) -> None:
        group = GroupInput(
            topics={"t0": 2, "t1": 2},
            members=(
                member("m0", ["t0", "t1"], capacity=3.0),
                member("m1", ["t0", "t1"]),
                member("m2", ["t0", "t1"]),
            ),
            lags={"t0": [5, 100], "t1": [5, 100]},
        )
        assignment = checked(group)
        assert names(assignment)["m0"] == ["t0p1", "t1p1"]
        assert compute_stats(group, assignment)["max_member_lag"] == pytest.approx(200 / 3)

    def test_count_balance_wins_over_capacity(self) -> None:
        """The module docstring's conflict: lag gives all four to the big member, we cannot."""
        group = GroupInput(
            topics={f"t{i}": 1 for i in range(4)},
            members=(
                member("A", [f"t{i}" for i in range(4)], capacity=100.0),
                member("B", [f"t{i}" for i in range(4)]),
            ),
            lags={f"t{i}": [1] for i in range(4)},
        )
        assignment = checked(group)
        assert [len(tps) for tps in assignment.values()] == [2, 2]
        assert compute_stats(group, assignment)["max_member_lag"] == 2
        assert compute_stats(group, lag_strategy(group))["max_member_lag"] == pytest.approx(0.04)

    def test_lag_strictly_lower_within_the_floor_still_wins(self) -> None:
        # Found by Hypothesis: the answer of max 10,000 is 0.01 % below fresh's (10,001), inside the
        # search's floor, where the ranking counted both as equal and kept fresh. (It was `lag`'s
        # answer before `lag` weighed capacity; `lag` now gives C1 fewer partitions, max 10,001.)
        group = GroupInput(
            topics={"t0": 3},
            members=(member("C0", ["t0"]), member("C1", ["t0"], capacity=0.5)),
            lags={"t0": [1, 1, 10_000]},
        )
        assert compute_stats(group, checked(group))["max_member_lag"] == 10_000
        assert names(checked(group)) == {"C0": ["t0p2"], "C1": ["t0p0", "t0p1"]}


class TestUnequalSubscriptions:
    def test_chains_balance_counts_across_topics(self) -> None:
        # A can take t0 and t1, B only t1: the only balanced split is A [t0 both], B [t1 both].
        group = GroupInput(
            topics={"t0": 2, "t1": 2},
            members=(member("A", ["t0", "t1"]), member("B", ["t1"])),
            lags={"t0": [0, 0], "t1": [100, 100]},
        )
        assignment = checked(group)
        assert names(assignment) == {"A": ["t0p0", "t0p1"], "B": ["t1p0", "t1p1"]}
        # lag balances each topic alone and gets a lower max by breaking count balance (3 vs 1):
        # count balance wins, as documented.
        lagged = lag_strategy(group)
        assert sorted(len(tps) for tps in lagged.values()) == [1, 3]
        assert compute_stats(group, lagged)["max_member_lag"] == 100
        assert compute_stats(group, assignment)["max_member_lag"] == 200

    def test_as_balanced_as_subscriptions_allow(self) -> None:
        group = GroupInput(
            topics={"t0": 1, "t1": 2, "t2": 3},
            members=(member("C0", ["t0"]), member("C1", ["t0", "t1"]), member("C2", ["t0", "t1", "t2"])),
        )
        counts = {m: len(tps) for m, tps in checked(group).items()}
        assert counts == {"C0": 1, "C1": 2, "C2": 3}


class TestStickiness:
    @pytest.mark.parametrize("seed", range(6))
    def test_unchanged_group_fed_its_own_answer_moves_nothing(self, seed: int) -> None:
        group = skewed_group(seed, partitions=240, members=7, zipf=seed % 2 == 1)
        first = checked(group)
        again = with_owned(group, first)
        second = checked(again)
        assert second == first
        assert compute_stats(again, second)["moves"] == 0

    def test_new_lags_move_few_partitions_for_the_same_quality(self) -> None:
        group = skewed_group(11, partitions=2000, members=10)
        first = checked(group)
        redrawn = skewed_group(12, partitions=2000, members=10).lags
        again = with_owned(group, first, lags=redrawn)
        stats = compute_stats(again, checked(again))
        assert stats["max_member_lag"] <= stats["lower_bound"] * 1.02
        assert stats["moves"] < 2000 // 10

    def test_higher_generation_claim_is_the_one_kept(self) -> None:
        tp = TopicPartition("t0", 0)
        group = GroupInput(
            topics={"t0": 2},
            members=(
                member("a", ["t0"], owned=[tp], generation=1),
                member("b", ["t0"], owned=[tp], generation=2),
            ),
            lags={"t0": [5, 5]},
        )
        assignment = checked(group)
        assert names(assignment) == {"a": ["t0p1"], "b": ["t0p0"]}
        assert compute_stats(group, assignment)["moves"] == 0


class TestMoveCap:
    @staticmethod
    def rebalanced(max_moves: int | None) -> tuple[GroupInput, Assignment]:
        group = skewed_group(21, partitions=400, members=8)
        first = checked(group)
        again = with_owned(group, first, lags=skewed_group(22, partitions=400, members=8).lags)
        again = GroupInput(
            topics=again.topics,
            members=again.members,
            lags=again.lags,
            options=AssignOptions(max_moves=max_moves),
        )
        return again, checked(again)

    def test_zero_moves_keeps_everything(self) -> None:
        group, assignment = self.rebalanced(0)
        assert compute_stats(group, assignment)["moves"] == 0
        assert all(list(m.owned) == sorted(assignment[m.member_id]) for m in group.members)

    @pytest.mark.parametrize("cap", [1, 2, 4, 8])
    def test_cap_is_respected_and_spent_on_lag(self, cap: int) -> None:
        group, assignment = self.rebalanced(cap)
        stats = compute_stats(group, assignment)
        assert stats["moves"] <= cap
        _, unmoved = self.rebalanced(0)
        unmoved_max = compute_stats(group, unmoved)["max_member_lag"]
        # Counts are all equal here, so only swaps (two moves each) keep them balanced.
        if cap >= 2:
            assert stats["max_member_lag"] < unmoved_max
        else:
            assert stats["max_member_lag"] == unmoved_max

    def test_larger_cap_is_never_worse(self) -> None:
        maxima = []
        for cap in (0, 2, 8, 32, None):
            group, assignment = self.rebalanced(cap)
            maxima.append(compute_stats(group, assignment)["max_member_lag"])
        assert maxima == sorted(maxima, reverse=True)

    def test_count_balance_overrides_the_cap(self) -> None:
        """A member joins: four members of three must hand two partitions to it, cap or not."""
        owned = {f"m{i}": [TopicPartition("t0", p) for p in range(3 * i, 3 * i + 3)] for i in range(4)}
        group = GroupInput(
            topics={"t0": 12},
            members=(*(member(m, ["t0"], owned=tps) for m, tps in owned.items()), member("new", ["t0"])),
            lags={"t0": [10] * 12},
            options=AssignOptions(max_moves=0),
        )
        assignment = checked(group)
        assert sorted(len(tps) for tps in assignment.values()) == [2, 2, 2, 3, 3]
        assert compute_stats(group, assignment)["moves"] == 2

    def test_lost_subscription_and_balance_override_the_cap(self) -> None:
        """a no longer subscribes to t1: t1p0 must go to b, and then a must take t0p1 to keep
        the counts even: two forced moves, beyond a cap of one."""
        group = GroupInput(
            topics={"t0": 2, "t1": 2},
            members=(
                member("a", ["t0"], owned=[TopicPartition("t0", 0), TopicPartition("t1", 0)]),
                member("b", ["t0", "t1"], owned=[TopicPartition("t0", 1), TopicPartition("t1", 1)]),
            ),
            lags={"t0": [1, 100], "t1": [1, 1]},
            options=AssignOptions(max_moves=1),
        )
        assignment = checked(group)
        assert names(assignment) == {"a": ["t0p0", "t0p1"], "b": ["t1p0", "t1p1"]}
        assert compute_stats(group, assignment)["moves"] == 2

    def test_partitions_of_a_topic_nobody_wants_count_against_the_cap(self) -> None:
        """C1 owned t1p0 but nobody subscribes to t1 now: that move is made, and uses the cap."""
        group = GroupInput(
            topics={"t1": 4, "t2": 7},
            members=(
                member("C0", ["t2"]),
                member(
                    "C1", ["t2"], owned=[TopicPartition("t1", 0), *(TopicPartition("t2", p) for p in (5, 6))]
                ),
            ),
            lags={"t2": [0, 0, 0, 0, 0, 1, 1]},
            options=AssignOptions(max_moves=1),
        )
        assert compute_stats(group, checked(group))["moves"] == 1

    def test_forced_moves_count_against_the_cap(self) -> None:
        """A member joins: two forced moves. A cap of two allows nothing more; larger caps allow
        moves for lag, each within its cap and never worse."""
        owned = {f"m{i}": [TopicPartition("t0", p) for p in range(3 * i, 3 * i + 3)] for i in range(4)}
        lags = [int(v) for v in np.random.default_rng(3).lognormal(5, 1.5, 12)]
        maxima = []
        for cap in (2, 4, 8):
            group = GroupInput(
                topics={"t0": 12},
                members=(*(member(m, ["t0"], owned=tps) for m, tps in owned.items()), member("new", ["t0"])),
                lags={"t0": lags},
                options=AssignOptions(max_moves=cap),
            )
            stats = compute_stats(group, checked(group))
            assert stats["moves"] == 2 if cap == 2 else stats["moves"] <= cap
            maxima.append(stats["max_member_lag"])
        assert maxima == sorted(maxima, reverse=True)


class TestQuality:
    @pytest.mark.parametrize("zipf", [False, True], ids=["log-normal", "zipf"])
    @pytest.mark.parametrize("seed", range(3))
    def test_within_two_percent_of_the_lower_bound_and_never_worse_than_lag(
        self, seed: int, zipf: bool
    ) -> None:
        group = skewed_group(seed, partitions=4000, members=20, zipf=zipf)
        stats = compute_stats(group, checked(group))
        assert stats["max_member_lag"] <= stats["lower_bound"] * 1.02
        assert stats["max_member_lag"] <= compute_stats(group, lag_strategy(group))["max_member_lag"]

    def test_deterministic(self) -> None:
        group = skewed_group(5, partitions=500, members=9)
        assert balanced(group) == balanced(group)
