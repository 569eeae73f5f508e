"""Where plan-delivery replicas start and what they commit (consumer/offsets.py, design §9.1),
against the real broker and API server: `latest` skips nothing written after the group started
(a first owner that dies before its first commit, partitions added mid-run), an offset that
retention deleted resumes at the oldest message left, and a late commit from a previous owner
never makes the group's offset move backwards.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from groupops.consumer.audit import Fault, load_journals
from tests.e2e.plan_driver import engine_target
from tests.e2e.runtime_support import ProducedLog
from tests.e2e.waiting import wait_for
from tests.integration.test_consumer_runtime import STARTUP_S, Group, owned_in_plan
from tests.integration.test_consumer_stuck import REPO_ROOT, produce_poison, stalling_env

pytestmark = pytest.mark.integration


def slow_50ms(message: Any) -> None:
    """The test processor (`GROUPOPS_PROCESSOR=tests.integration.test_consumer_offsets:slow_50ms`):
    50 ms per message, so a replica's progress stays behind an offset set from outside."""
    time.sleep(0.05)


def slow_env() -> dict[str, str]:
    return {
        "GROUPOPS_PROCESSOR": f"{__name__}:slow_50ms",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }


def latest_env(started: float) -> dict[str, str]:
    """What the operator renders by default: `latest`, and the policy's creation time."""
    return {"GROUPOPS_AUTO_OFFSET_RESET": "latest", "GROUPOPS_GROUP_STARTED": f"{started:.3f}"}


def produce(bootstrap: str, topic: str, partitions: range, per_partition: int, tag: str) -> ProducedLog:
    log = ProducedLog()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        log.acked.append((message.topic(), message.partition(), message.offset()))

    for i in range(per_partition):
        for partition in partitions:
            producer.produce(topic, f"{tag}-{i}".encode(), partition=partition, on_delivery=delivered)
    assert producer.flush(60) == 0
    return log


def group_offsets(g: Group) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": g.bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g.group_id)], request_timeout=10)
    partitions = next(iter(result.values())).result().topic_partitions
    return {tp.partition: tp.offset for tp in partitions if tp.topic == g.topic and tp.offset >= 0}


def processed_offsets(g: Group, identity: str | None = None) -> set[tuple[int, int]]:
    return {
        (r.partition, r.offset)
        for r in load_journals(g.journal_dir).processed
        if identity is None or r.identity == identity
    }


def test_under_latest_a_first_owner_that_dies_before_committing_loses_nothing_written_since_the_start(
    make_group: Callable[[int], Group],
) -> None:
    g = make_group(3)
    partitions = range(g.partitions)
    before = produce(g.bootstrap, g.topic, partitions, 5, "before")
    time.sleep(1.0)
    started = time.time()
    time.sleep(1.0)
    # Written after the group started but before any replica runs: `latest` must not skip them.
    since_start = ProducedLog()
    for partition in partitions:
        produce_poison(g.bootstrap, g.topic, partition, since_start)
    since_start.acked += produce(g.bootstrap, g.topic, partitions, 10, "early").acked

    first, second = g.identity(0), g.identity(1)
    topics = {g.topic: g.partitions}
    g.start_driver([first, second], engine_target("failover", topics, priorities={first: 10, second: 5}))
    # The first owner blocks on the first message it processes: it never commits anything.
    g.consumer(first, extra={**latest_env(started), **stalling_env(first)})
    g.consumer(second, extra={**latest_env(started), **stalling_env(first)})
    wait_for(
        "the first replica owning everything", lambda: len(owned_in_plan(g, first)) == g.partitions, STARTUP_S
    )
    # Not "both acknowledging the current plan": the first replica may stall on the poison message
    # before it acknowledges a later epoch (which gives it the same partitions).
    wait_for("the first replica assigned its partitions", lambda: "assign" in _events(g, first), 30)
    time.sleep(2.0)

    killed_at = time.time()
    g.consumers[first].kill()
    g.faults.append(Fault(first, "crash", killed_at))
    late = produce(g.bootstrap, g.topic, partitions, 10, "late")
    wait_for(
        "the second replica owning everything", lambda: len(owned_in_plan(g, second)) == g.partitions, 120
    )

    report = g.wait_processed(since_start.acked + late.acked, timeout=120)
    print(f"\n{report.summary()}")
    skipped = {(p, o) for _, p, o in before.acked} & processed_offsets(g)
    assert skipped == set(), "messages written before the group's first start are what `latest` skips"
    assert report.overlaps == []


def test_under_latest_partitions_added_while_the_group_runs_are_consumed_from_their_first_message(
    make_group: Callable[[int], Group],
) -> None:
    g = make_group(2)
    started = time.time()
    identity = g.identity(0)
    driver = g.start_driver([identity], engine_target("range", {g.topic: 2}))
    g.consumer(identity, extra=latest_env(started))
    wait_for("the replica acknowledging", lambda: g.all_acked_current([identity]), STARTUP_S)
    first = produce(g.bootstrap, g.topic, range(2), 10, "first")

    admin = AdminClient({"bootstrap.servers": g.bootstrap})
    admin.create_partitions([NewPartitions(g.topic, 4)])[g.topic].result(timeout=60)
    # Written to the new partitions before the plan gives them to anyone.
    added = produce(g.bootstrap, g.topic, range(2, 4), 10, "added")
    driver.target = engine_target("range", {g.topic: 4})
    wait_for("the replica owning the new partitions", lambda: len(owned_in_plan(g, identity)) == 4, 60)
    more = produce(g.bootstrap, g.topic, range(4), 5, "more")

    report = g.wait_processed(first.acked + added.acked + more.acked, timeout=120)
    print(f"\n{report.summary()}")
    events = load_journals(g.journal_dir).events
    starts = [e for e in events if e["k"] == "assign" and e.get("starts")]
    assert any(f"{g.topic}-2" in e["starts"] for e in starts), "the new partition's start was pinned"
    assert not [e for e in events if e["k"] == "foreign-commit"], "its own pinned starts are not foreign"


def test_an_offset_deleted_by_retention_resumes_at_the_oldest_message_left(
    make_group: Callable[[int], Group],
) -> None:
    g = make_group(2)
    identity = g.identity(0)
    g.start_driver([identity], engine_target("range", {g.topic: 2}))
    g.consumer(identity, extra=latest_env(time.time() - 60))
    wait_for("the replica acknowledging", lambda: g.all_acked_current([identity]), STARTUP_S)
    first = produce(g.bootstrap, g.topic, range(2), 20, "first")
    g.wait_processed(first.acked, timeout=60)
    assert g.consumers[identity].terminate(grace=60) == 0
    committed = group_offsets(g)
    assert committed == {0: 20, 1: 20}

    # 30 more per partition, then retention takes everything below offset 40: the group's
    # commits (20) point below the log start.
    second = produce(g.bootstrap, g.topic, range(2), 30, "second")
    admin = AdminClient({"bootstrap.servers": g.bootstrap})
    futures = admin.delete_records([KafkaPartition(g.topic, p, 40) for p in range(2)])
    for future in futures.values():
        future.result(timeout=60)

    g.consumer(identity, key="restarted", extra=latest_env(time.time() - 60))
    left = [(t, p, o) for t, p, o in second.acked if o >= 40]
    g.wait_processed(first.acked + left, timeout=120)
    resets = [e for e in load_journals(g.journal_dir).events if e["k"] == "offset-reset"]
    print(f"\noffset resets journaled: {resets}")
    assert {e["part"] for e in resets} == {f"{g.topic}-0", f"{g.topic}-1"}
    wait_for("the group's offsets past the retained messages", lambda: group_offsets(g) == {0: 50, 1: 50}, 30)


def start_slow_replica(g: Group) -> None:
    """400 messages on the group's one partition and one replica (20 messages a second) owning
    it from the start of the log."""
    identity = g.identity(0)
    produce(g.bootstrap, g.topic, range(1), 400, "backlog")
    g.start_driver([identity], engine_target("range", {g.topic: 1}))
    g.consumer(identity, extra={**slow_env(), "GROUPOPS_AUTO_OFFSET_RESET": "earliest"})


def test_a_late_commit_of_a_previous_owner_never_moves_the_group_offset_backwards(
    make_group: Callable[[int], Group],
) -> None:
    g = make_group(1)
    start_slow_replica(g)
    wait_for("the replica processing", lambda: len(processed_offsets(g)) >= 5, STARTUP_S)

    # The commit a former owner sent before it was fenced, landing now: offset 300, ahead of
    # this replica (about 20 messages a second).
    late = Consumer({"bootstrap.servers": g.bootstrap, "group.id": g.group_id})
    late.commit(offsets=[KafkaPartition(g.topic, 0, 300)], asynchronous=False)
    late.close()

    lowest_after = [10**9]
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.2):
            offset = group_offsets(g).get(0)
            if offset is not None:
                lowest_after[0] = min(lowest_after[0], offset)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        wait_for("the replica's own commits passing 300", lambda: group_offsets(g).get(0, 0) > 310, 60)
    finally:
        stop.set()
        watcher.join(timeout=10)
    events = [e for e in load_journals(g.journal_dir).events if e["k"] in ("behind-group", "foreign-commit")]
    print(f"\nlowest group offset after the late commit: {lowest_after[0]}; {events}")
    assert lowest_after[0] >= 300, "the replica committed below the offset the group held"
    assert any(e["k"] == "foreign-commit" and e["group"] == 300 for e in events), "it moved to 300"


def test_a_reset_with_kafkas_own_tool_while_the_group_runs_is_honoured_not_overwritten(
    make_group: Callable[[int], Group],
) -> None:
    g = make_group(1)
    start_slow_replica(g)
    wait_for("the replica committing past 40", lambda: group_offsets(g).get(0, 0) > 40, STARTUP_S)

    # What `kafka-consumer-groups --reset-offsets --to-earliest --execute` does; Kafka accepts it
    # because plan-delivery replicas are no members of the group on the broker.
    admin = AdminClient({"bootstrap.servers": g.bootstrap})
    request = ConsumerGroupTopicPartitions(g.group_id, [KafkaPartition(g.topic, 0, 10)])
    for future in admin.alter_consumer_group_offsets([request]).values():
        future.result(timeout=30)
    reset_at = time.time()

    def processed_again() -> bool:
        return any(r.offset == 10 and r.start > reset_at for r in load_journals(g.journal_dir).processed)

    wait_for("offset 10 processed again after the reset", processed_again, 30)
    foreign = [e for e in load_journals(g.journal_dir).events if e["k"] == "foreign-commit"]
    print(f"\n{foreign}")
    assert [e["group"] for e in foreign] == [10]
    wait_for("the replica committing from the reset on", lambda: 10 < group_offsets(g).get(0, 0) < 300, 30)


def _events(g: Group, identity: str) -> set[str]:
    return {str(e["k"]) for e in load_journals(g.journal_dir).events if e.get("i") == identity}
