"""The fleet benchmark's load (benchmarks/fleet.py): which partitions are hot when, one producer
thread that writes that schedule to the broker, and the producer's own record of when each
message was produced (offset -> produce time, per partition, from the delivery reports).

The schedule is pure and seeded. In every phase each topic has two hot partitions; for half of
the topics (a different, random half every phase) both sit in one block of Kafka's range
assignment over the replicas (partitions 0-3 or 4-7 with 8 partitions and 2 replicas: on one
range replica, *concentrated*), for the other half one is in each block (*spread*). A static
range group therefore falls behind in about half of the phases; a lag-driven group can spread
the pair whatever it is.

Worked example (8 partitions, 2 replicas, cold rate c, hot rate 5c): concentrated, range's
replica 0 gets 2 x 5c + 2c = 12c and replica 1 4c; spread, each gets 5c + 3c = 8c. With a replica
that drains 9.6c per second, concentrated is 125 % of one replica and spread 83 %.
"""

from __future__ import annotations

import bisect
import random
import threading
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Producer

__all__ = ["LoadShape", "Phase", "ProduceRecord", "ShiftingProducer", "hot_schedule", "range_block"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadShape:
    """topics: one per group pair; partitions per topic; replicas per policy (for range's blocks);
    cold_rate / hot_rate: messages per second of a cold / hot partition; hot_per_topic: hot
    partitions per topic; phase_s: how long a hot set lasts."""

    topics: int
    partitions: int
    replicas: int
    cold_rate: float
    hot_rate: float
    hot_per_topic: int
    phase_s: float

    def topic_rate(self) -> float:
        return self.hot_per_topic * self.hot_rate + (self.partitions - self.hot_per_topic) * self.cold_rate


@dataclass(frozen=True, slots=True)
class Phase:
    """Phase `index` starts `start_s` after the load starts; `hot[t]` are topic t's hot partitions
    and `concentrated[t]` whether they sit on one range replica."""

    index: int
    start_s: float
    hot: tuple[tuple[int, ...], ...]
    concentrated: tuple[bool, ...]


def range_block(partition: int, partitions: int, replicas: int) -> int:
    """The replica Kafka's RangeAssignor gives `partition` (one topic, replicas sorted by id: the
    first `partitions % replicas` replicas get one partition more)."""
    quota, extra = divmod(partitions, replicas)
    boundary = extra * (quota + 1)
    if partition < boundary:
        return partition // (quota + 1)
    return extra + (partition - boundary) // quota


def hot_schedule(shape: LoadShape, phases: int, seed: int) -> list[Phase]:
    """`phases` phases of `shape.phase_s`. Per phase: a random half of the topics concentrated
    (every hot partition in one range block), the rest spread over different blocks; a topic's
    hot set always changes from one phase to the next."""
    chooser = random.Random(seed)
    blocks: list[list[int]] = [[] for _ in range(shape.replicas)]
    for partition in range(shape.partitions):
        blocks[range_block(partition, shape.partitions, shape.replicas)].append(partition)
    if shape.hot_per_topic > min(len(b) for b in blocks) or shape.hot_per_topic > shape.replicas:
        raise ValueError(
            f"hot_per_topic {shape.hot_per_topic} must fit in one range block ({min(map(len, blocks))} "
            f"partitions) and spread over the replicas ({shape.replicas})"
        )
    result: list[Phase] = []
    previous: list[tuple[int, ...]] = [() for _ in range(shape.topics)]
    for index in range(phases):
        concentrated_topics = set(chooser.sample(range(shape.topics), shape.topics // 2))
        hot: list[tuple[int, ...]] = []
        for topic in range(shape.topics):
            while True:
                if topic in concentrated_topics:
                    pick = tuple(sorted(chooser.sample(chooser.choice(blocks), shape.hot_per_topic)))
                else:
                    chosen_blocks = chooser.sample(blocks, shape.hot_per_topic)
                    pick = tuple(sorted(chooser.choice(block) for block in chosen_blocks))
                if pick != previous[topic]:
                    break
            hot.append(pick)
            previous[topic] = pick
        result.append(
            Phase(
                index=index,
                start_s=index * shape.phase_s,
                hot=tuple(hot),
                concentrated=tuple(t in concentrated_topics for t in range(shape.topics)),
            )
        )
    return result


class ProduceRecord:
    """Per partition, the offsets the broker acknowledged and their produce times (the message's
    CreateTime, set by the client when `produce` was called), in offset order.

    Written by the producer thread's delivery callbacks, read by the sampler thread: appends to an
    `array` and reads by index are each atomic under the GIL, and a reader only looks below the
    length it read first."""

    def __init__(self) -> None:
        self._offsets: dict[tuple[str, int], array[int]] = {}
        self._times: dict[tuple[str, int], array[float]] = {}
        self.acknowledged = 0
        self.failed = 0

    def add(self, topic: str, partition: int, offset: int, produced_at: float) -> None:
        key = (topic, partition)
        offsets = self._offsets.setdefault(key, array("q"))
        times = self._times.setdefault(key, array("d"))
        if offsets and offset <= offsets[-1]:  # out of order (a retried batch): keep the order
            at = bisect.bisect_left(offsets, offset)
            if at < len(offsets) and offsets[at] == offset:
                return
            offsets.insert(at, offset)
            times.insert(at, produced_at)
        else:
            offsets.append(offset)
            times.append(produced_at)
        self.acknowledged += 1

    def time_lag(self, topic: str, partition: int, committed: int | None, now: float) -> float:
        """Seconds since the first message at or after `committed` (the group's next offset;
        None: no commit yet, so the first message) was produced; 0 when there is none (the group
        has consumed everything acknowledged so far)."""
        offsets = self._offsets.get((topic, partition))
        times = self._times.get((topic, partition))
        if not offsets or times is None:
            return 0.0
        known = min(len(offsets), len(times))
        at = 0 if committed is None else bisect.bisect_left(offsets, committed, 0, known)
        if at >= known:
            return 0.0
        return max(0.0, now - times[at])


class ShiftingProducer:
    """One thread producing `shape` on topics `topics[i]` in the hot sets of `phases`, paced in
    20 ms steps (rates are exact over a second, never bursts of a phase). `started_at`: wall time
    of the first step, the phases' origin."""

    STEP_S = 0.02

    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str],
        shape: LoadShape,
        phases: Sequence[Phase],
        record: ProduceRecord,
        *,
        payload_bytes: int = 100,
    ) -> None:
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": True}
        )
        self._topics = list(topics)
        self._shape = shape
        self._phases = list(phases)
        self._record = record
        self._payload = b"x" * payload_bytes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-producer", daemon=True)
        self.started_at = 0.0
        self.produced = 0
        self.errors: list[str] = []

    def start(self) -> ShiftingProducer:
        self.started_at = time.time()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._producer.flush(30)

    def phase_at(self, elapsed_s: float) -> Phase:
        index = min(int(elapsed_s // self._shape.phase_s), len(self._phases) - 1)
        return self._phases[max(0, index)]

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            self._record.failed += 1
            if len(self.errors) < 20:
                self.errors.append(str(error))
            return
        _, created_ms = message.timestamp()
        self._record.add(
            message.topic(),
            message.partition(),
            message.offset(),
            created_ms / 1000.0,
        )

    def _run(self) -> None:
        credit = [[0.0] * self._shape.partitions for _ in self._topics]
        last = time.time()
        while not self._stop.is_set():
            now = time.time()
            step, last = now - last, now
            phase = self.phase_at(now - self.started_at)
            for t, topic in enumerate(self._topics):
                hot = phase.hot[t]
                for partition in range(self._shape.partitions):
                    rate = self._shape.hot_rate if partition in hot else self._shape.cold_rate
                    credit[t][partition] += rate * step
                    while credit[t][partition] >= 1.0:
                        credit[t][partition] -= 1.0
                        self._produce(topic, partition)
            self._producer.poll(0)
            self._stop.wait(max(0.0, self.STEP_S - (time.time() - now)))

    def _produce(self, topic: str, partition: int) -> None:
        while True:
            try:
                self._producer.produce(topic, self._payload, partition=partition, on_delivery=self._delivered)
                self.produced += 1
                return
            except BufferError:
                self._producer.poll(0.05)
