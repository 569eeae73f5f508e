"""`owns` and `fencing_token` answer for the runtime running in this process, and nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field

from groupops.consumer import fencing_token, ownership, owns
from groupops.model import TopicPartition


@dataclass
class Replica:
    """Any runtime as `ownership` sees it: what it owns with a valid Lease, and its epoch."""

    owned: set[TopicPartition] = field(default_factory=set)
    epoch: int | None = None

    def owns_now(self, tp: TopicPartition) -> bool:
        return tp in self.owned

    def applied_epoch(self) -> int | None:
        return self.epoch


def test_outside_a_runtime_nothing_is_owned_and_there_is_no_token() -> None:
    ownership.running(None)
    assert not owns("orders", 0)
    assert fencing_token() is None


def test_answers_follow_the_running_runtime_until_it_stops() -> None:
    replica = Replica(owned={TopicPartition("orders", 1)}, epoch=7)
    ownership.running(replica)
    try:
        assert owns("orders", 1) and not owns("orders", 0)
        assert fencing_token() == 7
        replica.owned.clear()  # released, fenced or Lease expired
        replica.epoch = 9
        assert not owns("orders", 1)
        assert fencing_token() == 9
    finally:
        ownership.running(None)
    assert not owns("orders", 1) and fencing_token() is None
