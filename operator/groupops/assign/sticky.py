"""`sticky`: Apache Kafka's StickyAssignor (kafka-clients 4.x), to the partition.

Guarantees, in priority order:
1. Balance: with equal subscriptions every member gets P // N or P // N + 1 partitions; with
   unequal ones no partition can move to a member holding two or more fewer than its owner.
2. Stickiness: as many owned partitions stay with their owner as balance allows. A partition
   claimed by two members stays with the higher generation; claimed by two members of one
   generation, it is owned by nobody (Kafka treats that as corrupt state).
3. Rack awareness (KIP-881), when member racks and replica racks are given: owned partitions
   without a replica in the member's rack are given up, new ones go within racks first, never
   at the expense of balance.

Which of Kafka's two algorithms runs, and each one's numbered steps, are in
`groupops.assign.sticky_constrained` (all subscriptions equal) and
`groupops.assign.sticky_general` (otherwise). Java's iteration orders and tie-breaks are
reproduced (`groupops.assign.java_compat`), so the answer is Kafka's own. One input Kafka has and
we do not: the order in which the leader receives the members. It matters only when two member
ids fall in one bucket of the leader's HashMap and both need that order (same-generation claims
of one partition, or more members owning maxQuota than may keep it); we take member-id order,
so the answer never depends on the order of the input.

Example (Kafka's StickyAssignor javadoc, example 2): C0 subscribes to t0, C1 to t0 and t1, C2 to
t0, t1 and t2, which have 1, 2 and 3 partitions: C0 [t0p0], C1 [t1p0, t1p1], C2 [t2p0, t2p1,
t2p2]. When C0 leaves, C1 keeps its two and takes t0p0; C2 keeps its three.

Known differences from Kafka, all where Kafka's own answer is unusable:
- an empty subscription in a group whose other members subscribe alike: Kafka may give that
  member partitions of topics it does not subscribe to; here it gets none.
- an older-generation owner that no longer subscribes to a topic: Kafka moves the partition back
  to it during balancing. Where later moves repair that, the answer is Kafka's; where Kafka would
  end with it there, balancing is redone without such moves back.
- an older-generation owner that can take no partition at all: Kafka throws
  (NullPointerException); here its claim is ignored.
- a HashMap bucket of nine or more member ids (JDK tree bins) is not reproduced.
- an owned partition beyond its topic's count (the topic was recreated with fewer partitions):
  Kafka filters owned partitions by topic only, so it may hand the nonexistent partition back to
  its owner, or throw (IllegalStateException) when it throws off the quotas; here it is dropped.
  Where Kafka drops it too, the answer is Kafka's (`sticky_core`).

Subscriptions to topics not in `topics` and owned partitions of such topics are Kafka's normal
case, not a difference: the topic gets nobody, the partitions are dropped.
"""

from __future__ import annotations

import numpy as np

from groupops.assign.sticky_constrained import build_constrained
from groupops.assign.sticky_core import BoolArray, IntArray, StickyProblem, build_problem, materialize
from groupops.assign.sticky_general import build_general
from groupops.model import Assignment, GroupInput

__all__ = ["NAME", "assign", "plan"]

NAME = "sticky"


def assign(group: GroupInput) -> Assignment:
    problem = build_problem(group)
    owner, _ = plan(problem)
    return materialize(problem, owner)


def plan(problem: StickyProblem) -> tuple[IntArray, BoolArray]:
    """The owner of every partition as StickyAssignor decides it, and which of them are
    changing owner (CooperativeStickyAssignor withholds those for one round)."""
    if problem.all_equal:
        result = build_constrained(problem)
        return result.owner, result.transferring
    owner = build_general(problem)
    return owner, _changing_owner(problem, owner)


def _changing_owner(problem: StickyProblem, owner: IntArray) -> BoolArray:
    """`computePartitionsTransferringOwnership`: assigned to a member that did not claim it
    while some other member did."""
    claimed = np.zeros(problem.total, dtype=np.bool_)
    kept = np.zeros(problem.total, dtype=np.bool_)
    claimed[problem.claim_partition] = True
    kept[problem.claim_partition[owner[problem.claim_partition] == problem.claim_member]] = True
    changing: BoolArray = claimed & ~kept & (owner >= 0)
    return changing
