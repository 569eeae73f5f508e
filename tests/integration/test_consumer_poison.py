"""A callback that keeps raising on one message (consumer/failures.py, design §9.2), against the
real broker and API server, under each `onError` action: the replica never crashes, the other
partitions go on, and what happened to the message is visible (journal, metrics, dead-letter
record with its error headers)."""

from __future__ import annotations

import fnmatch
import os
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from groupops.consumer.audit import load_journals
from tests.e2e.operator_support import free_port
from tests.e2e.plan_driver import engine_target
from tests.e2e.runtime_support import ProducedLog, create_topic, scrape
from tests.e2e.waiting import wait_for
from tests.integration.test_consumer_offsets import group_offsets, processed_offsets, produce
from tests.integration.test_consumer_runtime import STARTUP_S, Group
from tests.integration.test_consumer_stuck import REPO_ROOT, produce_poison

pytestmark = pytest.mark.integration

INTERVAL_S = 6
"""maxPollIntervalSeconds here: a stopped partition must not be judged stuck within it."""


def fail_on_poison(message: Any) -> None:
    """The test processor: raises on the message `poison`, in every replica."""
    if message.value() == b"poison":
        raise ValueError(f"cannot parse record at offset {message.offset()}")


FAIL_WHERE = "GROUPOPS_TEST_FAIL_WHERE"


def fail_on_poison_where(message: Any) -> None:
    """The test processor of a replica-specific fault: raises on the message `poison` only in a
    process whose identity matches $GROUPOPS_TEST_FAIL_WHERE (fnmatch); elsewhere it goes through."""
    if fnmatch.fnmatchcase(os.environ.get("GROUPOPS_IDENTITY", ""), os.environ.get(FAIL_WHERE, "")):
        fail_on_poison(message)


def poison_env(action: str, **more: str) -> dict[str, str]:
    return {
        "GROUPOPS_PROCESSOR": f"{__name__}:fail_on_poison",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        "GROUPOPS_MAX_POLL_INTERVAL_SECONDS": str(INTERVAL_S),
        "GROUPOPS_ON_ERROR_ACTION": action,
        "GROUPOPS_ON_ERROR_RETRIES": "2",
        "GROUPOPS_ON_ERROR_BACKOFF_SECONDS": "0.2",
        **more,
    }


def start_with_poison(g: Group, env: dict[str, str]) -> tuple[ProducedLog, ProducedLog, ProducedLog, int]:
    """One replica owning both partitions; partition 0 gets 10 messages, the poison, 10 more;
    partition 1 gets 20. Returns (before, poison, after) on partition 0 and the metrics port."""
    identity = g.identity(0)
    port = free_port()
    g.start_driver([identity], engine_target("range", {g.topic: 2}))
    g.consumer(
        identity, extra={**env, "GROUPOPS_AUTO_OFFSET_RESET": "earliest", "GROUPOPS_METRICS_PORT": str(port)}
    )
    wait_for("the replica acknowledging", lambda: g.all_acked_current([identity]), STARTUP_S)
    before = produce(g.bootstrap, g.topic, range(1), 10, "before")
    poison = ProducedLog()
    produce_poison(g.bootstrap, g.topic, 0, poison)
    after = produce(g.bootstrap, g.topic, range(1), 10, "after")
    after.acked += produce(g.bootstrap, g.topic, range(1, 2), 20, "other").acked
    return before, poison, after, port


def metric(port: int, name: str) -> float:
    return scrape(port).get(name, 0.0)


def errors_counted(port: int, action: str) -> float:
    """groupops_consumer_processing_errors_total{action=...} as the replica serves it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "groupops_consumer_processing_errors_total" and sample.labels == {
                "action": action
            }:
                return float(sample.value)
    return 0.0


def still_running(g: Group, seconds: float) -> None:
    process = g.consumers[g.identity(0)]
    time.sleep(seconds)
    assert process.process is not None and process.process.poll() is None, process.log_tail(30)


def test_stop_pauses_the_partition_at_the_poison_message_and_the_replica_goes_on(
    make_group: Callable[[int], Group],
) -> None:
    g = make_group(2)
    before, poison, after, port = start_with_poison(g, poison_env("stop"))
    other = [m for m in after.acked if m[1] == 1]
    g.wait_processed(before.acked + other, timeout=120)
    poison_offset = poison.acked[0][2]
    wait_for(
        "partition 0 reported stopped",
        lambda: metric(port, "groupops_consumer_partitions_stopped") == 1,
        60,
    )
    # Longer than the max poll interval: a stopped partition is reported, not judged stuck.
    still_running(g, INTERVAL_S + 6)
    processed_p0 = {o for p, o in processed_offsets(g) if p == 0}
    assert max(processed_p0) == poison_offset - 1, "nothing after the poison message was processed"
    assert group_offsets(g).get(0) == poison_offset, "the committed offset stays at the poison message"
    stopped = [e for e in load_journals(g.journal_dir).events if e["k"] == "stopped"]
    assert [(e["part"], e["offset"]) for e in stopped] == [(f"{g.topic}-0", poison_offset)]
    assert "ValueError: cannot parse record" in stopped[0]["why"]
    assert errors_counted(port, "retried") == 2
    assert metric(port, "groupops_consumer_stuck_total") == 0


def test_skip_commits_past_the_poison_message(make_group: Callable[[int], Group]) -> None:
    g = make_group(2)
    before, poison, after, port = start_with_poison(g, poison_env("skip"))
    g.wait_processed(before.acked + poison.acked + after.acked, timeout=120)
    still_running(g, 1)
    assert errors_counted(port, "skipped") == 1
    wait_for("the group's offsets past everything", lambda: group_offsets(g) == {0: 21, 1: 20}, 30)


def test_dead_letter_writes_the_record_with_its_error_and_goes_on(
    make_group: Callable[[int], Group], unique_name: Callable[[str], str]
) -> None:
    g = make_group(2)
    dead_letters = unique_name("orders-dlq")
    create_topic(g.bootstrap, dead_letters, 1)
    before, poison, after, port = start_with_poison(
        g, poison_env("deadLetter", GROUPOPS_DEAD_LETTER_TOPIC=dead_letters)
    )
    g.wait_processed(before.acked + poison.acked + after.acked, timeout=120)
    still_running(g, 1)
    assert errors_counted(port, "dead_lettered") == 1

    reader = Consumer(
        {
            "bootstrap.servers": g.bootstrap,
            "group.id": unique_name("dlq-reader"),
            "auto.offset.reset": "earliest",
        }
    )
    reader.subscribe([dead_letters])
    try:
        record = wait_for("the dead-letter record", lambda: _first_record(reader), 60)
    finally:
        reader.close()
    headers = {key: value.decode() for key, value in record.headers()}
    assert record.value() == b"poison"
    assert headers["groupops.error.topic"] == g.topic
    assert headers["groupops.error.partition"] == "0"
    assert headers["groupops.error.offset"] == str(poison.acked[0][2])
    assert headers["groupops.error.class"] == "ValueError"
    assert headers["groupops.error.attempts"] == "3"
    assert headers["groupops.error.identity"] == g.identity(0)


def _first_record(reader: Consumer) -> Any:
    message = reader.poll(1.0)
    if message is None or message.error() is not None:
        return None
    return message


def test_a_native_replica_stops_the_partition_too_and_keeps_its_others(
    make_group: Callable[[int], Group],
) -> None:
    g = make_group(2)
    identity = g.identity(0)
    port = free_port()
    env = {
        **poison_env("stop"),
        "GROUPOPS_DELIVERY": "native",
        "GROUPOPS_STRATEGY": "range",
        "GROUPOPS_TOPICS": g.topic,
        # librdkafka wants max.poll.interval.ms >= session.timeout.ms; 6 s is the broker's minimum.
        "GROUPOPS_KAFKA_PROPERTIES": '{"session.timeout.ms":"6000"}',
        "GROUPOPS_AUTO_OFFSET_RESET": "earliest",
        "GROUPOPS_METRICS_PORT": str(port),
    }
    g.consumer(identity, extra=env)
    before = produce(g.bootstrap, g.topic, range(2), 10, "before")
    g.wait_processed(before.acked, timeout=STARTUP_S)
    poison = ProducedLog()
    produce_poison(g.bootstrap, g.topic, 0, poison)
    after = produce(g.bootstrap, g.topic, range(2), 10, "after")
    g.wait_processed([m for m in after.acked if m[1] == 1], timeout=60)
    wait_for(
        "partition 0 reported stopped", lambda: metric(port, "groupops_consumer_partitions_stopped") == 1, 60
    )
    still_running(g, INTERVAL_S + 6)
    poison_offset = poison.acked[0][2]
    assert max(o for p, o in processed_offsets(g) if p == 0) == poison_offset - 1
    lease = g.lease(identity)
    note = lease["metadata"]["annotations"].get("groupops.dev/stopped")  # type: ignore[index]
    assert note == f'[["{g.topic}",0,{poison_offset}]]', note


def test_moving_the_offset_of_a_stopped_partition_past_the_message_lets_it_go_on(
    make_group: Callable[[int], Group],
) -> None:
    """What a person does about a stopped partition without a new release: Kafka's own tool
    (`kafka-consumer-groups --reset-offsets --shift-by 1 --execute`) moves the group's offset past
    the message; the replica notices the foreign commit, consumes from there and reports the
    partition no longer stopped."""
    g = make_group(2)
    before, poison, after, port = start_with_poison(g, poison_env("stop"))
    wait_for("partition 0 stopped", lambda: metric(port, "groupops_consumer_partitions_stopped") == 1, 60)
    poison_offset = poison.acked[0][2]
    wait_for("the commit at the poison message", lambda: group_offsets(g).get(0) == poison_offset, 30)

    admin = AdminClient({"bootstrap.servers": g.bootstrap})
    request = ConsumerGroupTopicPartitions(g.group_id, [KafkaPartition(g.topic, 0, poison_offset + 1)])
    for future in admin.alter_consumer_group_offsets([request]).values():
        future.result(timeout=30)

    past = [m for m in after.acked if m[1] == 0]
    g.wait_processed(before.acked + past, timeout=60)
    wait_for("no partition stopped", lambda: metric(port, "groupops_consumer_partitions_stopped") == 0, 30)
    lease = g.lease(g.identity(0))
    assert "groupops.dev/stopped" not in lease["metadata"]["annotations"]  # type: ignore[index]
    assert (0, poison_offset) not in processed_offsets(g), "the poison message was skipped, not processed"
