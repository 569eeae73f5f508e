"""`cooperative-sticky`: Apache Kafka's CooperativeStickyAssignor (kafka-clients 4.x), to the
partition.

Guarantees: the `sticky` target (`groupops.assign.sticky`), except that a partition changing
owner is assigned to nobody in this round: its owner gives it up first, and a follow-up rebalance
(which Kafka's consumers request whenever they revoke something) hands it out again. That is
Kafka's `adjustAssignment`: with equal subscriptions the partitions changing owner are those the
builder reassigns after revoking them (or that two members of one generation claimed); otherwise,
every partition assigned to a member that did not own it while another member did.

How many follow-ups, with equal subscriptions: without KIP-881 rack-aware assignment, one; it
gives the withheld partitions to the members the target chose, and revokes nothing. With it, the
target itself can move between rebalances, exactly as in Kafka: a member keeps only owned
partitions with a replica in its rack, the others are dealt round robin again with the partitions
withheld last round (now owned by nobody), and that deal depends on which partitions are free.
Kafka promises no number of rounds; its own CooperativeStickyAssignorTest allows four follow-ups,
and four is the most it needed on the groups of tests/unit/assign/test_cooperative_sticky.py.

Example: C0 owns t0p0..t0p3 and C1 joins (both subscribe to t0). The sticky target is C0 [t0p0,
t0p1], C1 [t0p2, t0p3]; this round gives C0 [t0p0, t0p1] and C1 nothing, so C0 revokes t0p2 and
t0p3, and the next round (C0 owning two) gives them to C1.
"""

from __future__ import annotations

from groupops.assign.sticky import plan
from groupops.assign.sticky_core import build_problem, materialize
from groupops.model import Assignment, GroupInput

__all__ = ["NAME", "assign"]

NAME = "cooperative-sticky"


def assign(group: GroupInput) -> Assignment:
    problem = build_problem(group)
    owner, changing = plan(problem)
    owner[changing] = -1
    return materialize(problem, owner)
