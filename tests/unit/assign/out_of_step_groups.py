"""Groups whose members are out of step with the metadata (a topic missing, deleted, or recreated
with fewer partitions), after Apache Kafka's own test scenarios, with our own data.

Shared by tests/unit/assign/test_missing_and_deleted_topics.py (the expected answers) and
tests/differential/test_matches_kafka.py (the same groups through Kafka's own classes).
"""

from __future__ import annotations

from groupops.model import GroupInput
from tests.unit.assign.sticky_groups import group, member

ONLY_MISSING = group({"payments": 4}, [member("w1", ["ledger"]), member("w2", ["payments"])])
MISSING_AMONG_EXISTING = group({"audit": 1, "payments": 6}, [member("w1", ["audit", "ledger", "payments"])])
OWNED_OF_DELETED_TOPIC = group(
    {"payments": 2},
    [
        member(
            "w1",
            ["payments"],
            [("payments", 0), ("payments", 1), ("refunds", 0), ("refunds", 1)],
            generation=3,
        )
    ],
)
ONLY_SUBSCRIBED_TOPIC_DELETED = group(
    {}, [member("w1", ["payments"], [("payments", 0), ("payments", 1), ("payments", 2)], generation=3)]
)
TOPIC_REMOVED_BETWEEN_REBALANCES = group(
    {"audit": 3},
    [
        member("w1", ["audit"], [("payments", 0), ("audit", 0), ("audit", 2)], generation=4),
        member("w2", ["audit"], [("payments", 1), ("payments", 2), ("audit", 1)], generation=4),
    ],
)
RECREATED_WITH_FEWER_PARTITIONS = group(
    {"payments": 3},
    [
        member("w1", ["payments"], [("payments", 0), ("payments", 4)], generation=2),
        member("w2", ["payments"], [("payments", 1), ("payments", 5)], generation=2),
    ],
)


# A member that no longer subscribes to `payments` still reports a partition of its old count.
STALE_CLAIM_OF_AN_UNSUBSCRIBED_TOPIC = group(
    {"payments": 5},
    [
        member("idle", ["audit"], [("payments", 8)], generation=5),
        member("c1", ["audit", "payments"], [("payments", 4), ("payments", 0)], generation=5),
        member("c0", ["payments"], generation=5, rack="r1"),
    ],
    {
        "payments": (
            frozenset({"r1", "r3"}),
            frozenset(),
            frozenset({"r1", "r2"}),
            frozenset({"r2", "r4"}),
            frozenset({"r1", "r3", "r4"}),
        )
    },
)

# Every group above, by name, for the differential test.
OUT_OF_STEP_GROUPS: dict[str, GroupInput] = {
    "only-missing": ONLY_MISSING,
    "missing-among-existing": MISSING_AMONG_EXISTING,
    "owned-of-deleted-topic": OWNED_OF_DELETED_TOPIC,
    "only-subscribed-topic-deleted": ONLY_SUBSCRIBED_TOPIC_DELETED,
    "topic-removed-between-rebalances": TOPIC_REMOVED_BETWEEN_REBALANCES,
    "recreated-with-fewer-partitions": RECREATED_WITH_FEWER_PARTITIONS,
    "stale-claim-of-an-unsubscribed-topic": STALE_CLAIM_OF_AN_UNSUBSCRIBED_TOPIC,
}
