"""Where each owned partition goes on, and the rewinds the runtime refuses (consumer/rewind.py):
a message below the partition's position is dropped and reported once per partition with the
lowest offset seen; a position the runtime does not know (after a reset to the oldest message)
refuses nothing until a message from there is processed."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from groupops.consumer.rewind import ExpectedPositions
from groupops.model import TopicPartition

A, B = TopicPartition("orders", 0), TopicPartition("orders", 1)


@dataclass(frozen=True)
class Message:
    tp: TopicPartition
    at: int

    def topic(self) -> str:
        return self.tp.topic

    def partition(self) -> int:
        return self.tp.partition

    def offset(self) -> int:
        return self.at


def batch(*pairs: tuple[TopicPartition, int]) -> list[Message]:
    return [Message(tp, offset) for tp, offset in pairs]


def test_a_partition_that_jumps_back_below_its_commit_is_refused_and_the_others_go_on() -> None:
    positions = ExpectedPositions()
    positions.expect(A, 83)  # assigned at the commit its previous owner made
    positions.expect(B, 10)
    kept, rewound = positions.split(batch((A, 83), (A, 84), (B, 10), (B, 11)))
    assert [(m.tp, m.at) for m in kept] == [(A, 83), (A, 84), (B, 10), (B, 11)]
    assert rewound == {}
    for message in kept:
        positions.processed(message.tp, message.at)

    # A stale offset answer lands: A starts over from 0.
    kept, rewound = positions.split(batch((A, 1), (A, 0), (A, 2), (B, 12), (A, 85)))
    assert rewound == {A: (0, 85)}, "the lowest offset delivered and where A goes on"
    assert [(m.tp, m.at) for m in kept] == [(B, 12), (A, 85)]


def test_an_unknown_position_refuses_nothing_until_something_is_processed() -> None:
    positions = ExpectedPositions()
    positions.expect(A, 40)
    positions.expect(A, None)  # reset to the oldest message: librdkafka finds where that is
    kept, rewound = positions.split(batch((A, 0), (A, 1)))
    assert len(kept) == 2 and rewound == {}
    positions.processed(A, 1)
    assert positions.split(batch((A, 0)))[1] == {A: (0, 2)}


def test_a_released_or_fenced_partition_has_no_position_left() -> None:
    positions = ExpectedPositions()
    positions.expect(A, 5)
    positions.expect(B, 7)
    positions.forget([A])
    assert positions.next_of(A) is None and positions.next_of(B) == 7
    positions.clear()
    assert positions.next_of(B) is None
    positions.expect(A, -1001)  # librdkafka's "invalid": unknown
    assert positions.next_of(A) is None


@given(
    start=st.integers(0, 1000),
    offsets=st.lists(st.integers(0, 2000), max_size=40),
)
def test_what_is_kept_never_goes_below_the_position_and_everything_at_or_above_it_is_kept(
    start: int, offsets: list[int]
) -> None:
    positions = ExpectedPositions()
    positions.expect(A, start)
    kept, rewound = positions.split(batch(*((A, offset) for offset in offsets)))
    assert [m.at for m in kept] == [offset for offset in offsets if offset >= start]
    below = [offset for offset in offsets if offset < start]
    assert rewound == ({A: (min(below), start)} if below else {})
