"""Delivery native: the prediction against the broker's actual assignment."""

from __future__ import annotations

from groupops.controller.native import compare_with_broker
from groupops.lag.base import GroupAssignment
from groupops.model import TopicPartition


def tp(partition: int) -> TopicPartition:
    return TopicPartition("orders", partition)


PREDICTED = {"g-0": [tp(0), tp(1)], "g-1": [tp(2)], "g-2": []}


def broker(state: str, members: dict[str, list[TopicPartition]]) -> GroupAssignment:
    return GroupAssignment(
        group_id="g", state=state, members={m: tuple(sorted(tps)) for m, tps in members.items()}
    )


def test_equal_sets_match_whatever_the_order_and_idle_members() -> None:
    agreement = compare_with_broker(
        PREDICTED, broker("Stable", {"g-1": [tp(2)], "g-0": [tp(1), tp(0)], "g-2": []}), epoch=4
    )
    assert agreement.matches is True
    assert agreement.to_status() == {"groupState": "Stable", "differing": [], "matches": True}
    assert "epoch 4" in agreement.message


def test_a_moved_partition_names_both_members_and_a_stranger_differs_too() -> None:
    actual = broker("Stable", {"g-0": [tp(0)], "g-1": [tp(1), tp(2)], "other-app": []})
    agreement = compare_with_broker(PREDICTED, actual, epoch=4)
    assert agreement.matches is False
    assert agreement.differing == ("g-0", "g-1")  # an idle stranger owns nothing predicted
    busy_stranger = broker("Stable", {"g-0": [tp(0), tp(1)], "g-1": [], "other-app": [tp(2)]})
    assert compare_with_broker(PREDICTED, busy_stranger, epoch=4).differing == ("g-1", "other-app")


def test_a_group_in_rebalance_is_not_judged() -> None:
    agreement = compare_with_broker(PREDICTED, broker("PreparingRebalance", {}), epoch=4)
    assert agreement.matches is None
    assert "matches" not in agreement.to_status()
    assert "Stable" in agreement.message
