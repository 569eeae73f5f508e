"""Our `range`, `roundrobin`, `sticky` and `cooperative-sticky` against Apache Kafka's own assignors.

Thousands of seeded random groups (tests/differential/random_groups.py) go through our strategy and
through Kafka's Java assignor of the same name (kafka-clients, run by tools/kafka-assignors in one
JVM per strategy). Range and RoundRobin must give Kafka's answer to the partition, every time.

The sticky pair must give Kafka's answer wherever Kafka's answer is deterministic: the harness
hands every group to Kafka several times, renamed with a prefix that keeps Java's string order and
shuffled, and calls the answer deterministic only when all of them agree (Kafka's sticky code walks
HashMaps, so some answers depend on the hashes of the names). Elsewhere ours must be at least as
balanced as Kafka's (smaller or equal max - min count, the same counts when every subscription is
the same) and move no more partitions than Kafka's (moves from owned, `compute_stats`).

Groups on which Kafka's assignor throws, or answers something that breaks our invariants (it can
give partitions to a member that does not subscribe to their topic, see
test_enough_groups_are_compared_despite_kafkas_quirks), are not
compared; ours must still keep every invariant on them, and they must stay rare.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from groupops.assign import get_strategy
from groupops.assign.invariants import InvariantViolation, check_assignment
from groupops.assign.stats import compute_stats
from groupops.contract import group_to_json
from groupops.model import Assignment, GroupInput
from tests.differential.kafka_harness import KafkaAnswer, kafka_assign
from tests.differential.random_groups import random_groups
from tests.unit.assign.out_of_step_groups import OUT_OF_STEP_GROUPS

pytestmark = pytest.mark.differential

GROUPS_PER_STRATEGY = 2500
SEED = 20_881
# Presentations per group for the sticky pair (1 canonical + renamed/shuffled ones).
STICKY_VARIANTS = 4
# Groups per strategy that must be compared with Kafka (those Kafka fails on are not).
MIN_COMPARED = 2000
SHOWN_FAILURES = 3

KafkaAnswers = Callable[[str], list[KafkaAnswer]]


@pytest.fixture(scope="module")
def groups() -> list[GroupInput]:
    return random_groups(SEED, GROUPS_PER_STRATEGY)


@pytest.fixture(scope="module")
def kafka(groups: list[GroupInput]) -> KafkaAnswers:
    """Kafka's answers for all groups under a strategy: one JVM run per strategy, kept for the module."""
    cache: dict[str, list[KafkaAnswer]] = {}

    def answers(strategy: str) -> list[KafkaAnswer]:
        if strategy not in cache:
            variants = STICKY_VARIANTS if "sticky" in strategy else 2
            cache[strategy] = kafka_assign(strategy, groups, variants=variants)
        return cache[strategy]

    return answers


def names(assignment: Assignment) -> dict[str, list[str]]:
    return {member: [str(tp) for tp in partitions] for member, partitions in sorted(assignment.items())}


@dataclass
class Report:
    """What happened to every group, and the first few failures in full."""

    strategy: str
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def fail(self, what: str, group: GroupInput, **details: object) -> None:
        self.count(f"FAILED {what}")
        if len(self.failures) < SHOWN_FAILURES:
            shown = "\n".join(f"  {key}: {value}" for key, value in details.items())
            self.failures.append(
                f"{what}\n  group: {json.dumps(group_to_json(self.strategy, group))}\n{shown}"
            )

    def assert_no_failures(self) -> None:
        failed = sum(n for what, n in self.counts.items() if what.startswith("FAILED"))
        summary = ", ".join(f"{what}: {n}" for what, n in sorted(self.counts.items()))
        assert failed == 0, f"{self.strategy}: {summary}\n\n" + "\n\n".join(self.failures)


def kafka_quirk(group: GroupInput, answer: KafkaAnswer, *, cooperative: bool) -> str | None:
    """Why Kafka's answer cannot be compared (it threw, or broke an invariant), else None."""
    if answer.error is not None or answer.assignment is None:
        return "kafka threw"
    for assignment in (answer.assignment, answer.target or {}):
        if any(not group.exists(tp) for partitions in assignment.values() for tp in partitions):
            return "kafka handed back a partition that no longer exists"
    try:
        check_assignment(group, answer.assignment, may_leave_moving_unassigned=cooperative)
        if answer.target is not None:
            check_assignment(group, answer.target)
    except InvariantViolation:
        return "kafka answer invalid"
    return None


def ours_or_failure(
    report: Report, strategy: str, group: GroupInput, *, cooperative: bool = False
) -> Assignment | None:
    try:
        ours = get_strategy(strategy)(group)
        check_assignment(group, ours, may_leave_moving_unassigned=cooperative)
    except (InvariantViolation, NotImplementedError, ValueError, KeyError) as e:
        report.fail("ours raised or broke an invariant", group, error=f"{type(e).__name__}: {e}")
        return None
    return ours


def spread(assignment: Assignment) -> int:
    counts = [len(partitions) for partitions in assignment.values()]
    return max(counts) - min(counts) if counts else 0


def compare_exactly(strategy: str, groups: list[GroupInput], answers: list[KafkaAnswer]) -> Report:
    report = Report(strategy)
    for group, answer in zip(groups, answers, strict=True):
        ours = ours_or_failure(report, strategy, group)
        if ours is None:
            continue
        if answer.error is not None or answer.assignment is None:
            report.fail("kafka threw", group, kafka=answer.error)
        elif answer.deterministic is False:
            report.fail("kafka not deterministic", group)
        elif ours != answer.assignment:
            report.fail("differs from kafka", group, ours=names(ours), kafka=names(answer.assignment))
        else:
            report.count("identical to kafka")
    return report


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_gives_kafkas_exact_answer_on_every_random_group(
    strategy: str, groups: list[GroupInput], kafka: KafkaAnswers
) -> None:
    report = compare_exactly(strategy, groups, kafka(strategy))
    report.assert_no_failures()
    assert report.counts.get("identical to kafka") == len(groups)


def compare_sticky(
    strategy: str,
    groups: list[GroupInput],
    answers: list[KafkaAnswer],
    *,
    target_of: Callable[[GroupInput, Assignment], Assignment],
    kafka_target_of: Callable[[KafkaAnswer], Assignment],
) -> Report:
    """Exact where Kafka is deterministic; else balance of the targets and moves of the answers."""
    cooperative = strategy == "cooperative-sticky"
    report = Report(strategy)
    for group, answer in zip(groups, answers, strict=True):
        ours = ours_or_failure(report, strategy, group, cooperative=cooperative)
        if ours is None:
            continue
        quirk = kafka_quirk(group, answer, cooperative=cooperative)
        if quirk is not None:
            report.count(f"not compared: {quirk}")
            continue
        assert answer.assignment is not None
        if answer.deterministic:
            if ours == answer.assignment:
                report.count("identical to kafka (kafka deterministic)")
            else:
                report.fail(
                    "differs from deterministic kafka",
                    group,
                    ours=names(ours),
                    kafka=names(answer.assignment),
                )
            continue
        target, kafka_target = target_of(group, ours), kafka_target_of(answer)
        equal_subscriptions = len({member.topics for member in group.members}) == 1
        our_moves = compute_stats(group, ours)["moves"]
        kafka_moves = compute_stats(group, answer.assignment)["moves"]
        our_counts = sorted(len(p) for p in target.values())
        kafka_counts = sorted(len(p) for p in kafka_target.values())
        if spread(target) > spread(kafka_target) or (equal_subscriptions and our_counts != kafka_counts):
            report.fail("less balanced than kafka", group, ours=our_counts, kafka=kafka_counts)
        elif our_moves > kafka_moves:
            report.fail("more moves than kafka", group, ours=our_moves, kafka=kafka_moves)
        else:
            report.count("as balanced as kafka, no more moves (kafka not deterministic)")
    return report


def test_sticky_matches_kafka_or_is_as_balanced_with_no_more_moves(
    groups: list[GroupInput], kafka: KafkaAnswers
) -> None:
    report = compare_sticky(
        "sticky",
        groups,
        kafka("sticky"),
        target_of=lambda group, ours: ours,
        kafka_target_of=lambda answer: answer.assignment or {},
    )
    report.assert_no_failures()


def test_cooperative_sticky_matches_kafka_or_is_as_balanced_with_no_more_moves(
    groups: list[GroupInput], kafka: KafkaAnswers
) -> None:
    # The balance of a cooperative round is the balance of its target, the sticky assignment the
    # round is heading to: Kafka reports its own (the harness's "target"); ours is our `sticky`.
    sticky = get_strategy("sticky")
    report = compare_sticky(
        "cooperative-sticky",
        groups,
        kafka("cooperative-sticky"),
        target_of=lambda group, ours: sticky(group),
        kafka_target_of=lambda answer: answer.target or {},
    )
    report.assert_no_failures()


@pytest.mark.parametrize("strategy", ["sticky", "cooperative-sticky"])
def test_enough_groups_are_compared_despite_kafkas_quirks(
    strategy: str, groups: list[GroupInput], kafka: KafkaAnswers
) -> None:
    """Kafka 4.x's sticky assignors fail on some groups, which are then left out of the comparison:
    - they throw a NullPointerException (GeneralAssignmentBuilder.performReassignments) when a
      member that can take no partition reports owned partitions with an older generation;
    - they give partitions to a member with an empty subscription when all other members
      subscribe alike and that member comes first in their HashMap (the constrained path);
    - they hand a partition back to its older-generation previous owner even when that owner no
      longer subscribes to the topic (the general path);
    - they give an owner back an owned partition beyond its topic's count (the topic was
      recreated with fewer partitions) while it still subscribes: Kafka filters owned partitions
      by topic only, so the nonexistent partition is "kept" (and the two-pointer scan for
      unassigned partitions can then hand a partition to two members), or its quota accounting
      goes wrong and it throws IllegalStateException ("No more unfilled consumers").
    At least MIN_COMPARED groups per strategy must remain."""
    cooperative = strategy == "cooperative-sticky"
    answers = kafka(strategy)
    quirks = [
        kafka_quirk(group, answer, cooperative=cooperative)
        for group, answer in zip(groups, answers, strict=True)
    ]
    compared = sum(quirk is None for quirk in quirks)
    assert compared >= MIN_COMPARED, (
        f"{strategy}: only {compared} of {len(groups)} groups compared with Kafka"
    )


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_out_of_step_topics_give_kafkas_answer(strategy: str) -> None:
    """Kafka's own scenarios of missing and deleted topics (tests/unit/assign/
    out_of_step_groups.py) through Kafka's classes: the answer is ours wherever Kafka's is
    usable. The one group whose owned partitions lie beyond the topic's count makes Kafka's
    sticky assignors throw ("No more unfilled consumers to be assigned"): not compared."""
    groups = list(OUT_OF_STEP_GROUPS.values())
    answers = kafka_assign(strategy, groups, variants=4)
    cooperative = strategy == "cooperative-sticky"
    compared = 0
    for (name, group), answer in zip(OUT_OF_STEP_GROUPS.items(), answers, strict=True):
        if kafka_quirk(group, answer, cooperative=cooperative) is not None:
            assert "sticky" in strategy and name == "recreated-with-fewer-partitions", (name, answer)
            continue
        assert answer.deterministic, name
        ours = get_strategy(strategy)(group)
        check_assignment(group, ours, may_leave_moving_unassigned=cooperative)
        assert answer.assignment is not None
        assert names(ours) == names(answer.assignment), name
        compared += 1
    assert compared >= len(groups) - 1


def test_random_groups_cover_what_makes_kafka_branch(groups: list[GroupInput]) -> None:
    """The comparison above is only as good as its inputs: enough of every kind."""

    def share(predicate: Callable[[GroupInput], bool]) -> float:
        return sum(predicate(group) for group in groups) / len(groups)

    def rack_aware_range(group: GroupInput) -> bool:
        racks = {member.rack for member in group.members if member.rack}
        return any(
            len(set(per_partition)) > 1 and racks & set().union(*per_partition)
            for per_partition in group.partition_racks.values()
        )

    assert share(lambda g: any(m.group_instance_id for m in g.members)) > 0.3
    assert share(lambda g: any(not m.group_instance_id for m in g.members)) > 0.6
    assert share(lambda g: len({m.topics for m in g.members}) > 1) > 0.3
    assert share(lambda g: len({m.topics for m in g.members}) == 1 and len(g.members) > 1) > 0.3
    assert share(lambda g: any(m.owned for m in g.members)) > 0.6
    assert share(lambda g: len({m.generation for m in g.members if m.owned}) > 1) > 0.3
    assert share(rack_aware_range) > 0.3
    assert share(lambda g: {m.member_id[0].isupper() for m in g.members} == {True, False}) > 0.3
    # Topics out of step with the metadata (a topic deleted, or recreated with fewer partitions).
    assert share(lambda g: bool(g.missing_topics())) > 0.2
    assert share(lambda g: any(tp.topic not in g.topics for m in g.members for tp in m.owned)) > 0.05
    assert (
        share(lambda g: any(tp.topic in g.topics and not g.exists(tp) for m in g.members for tp in m.owned))
        > 0.05
    )
