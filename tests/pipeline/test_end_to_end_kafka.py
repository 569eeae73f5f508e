"""End to end with Apache Kafka's own broker: snapshots of a live consumer group, captured by
`groupops snapshot` (and its library), land in a Parquet dataset and on a Kafka topic; the pipeline
reads both (the topic through Spark's Kafka source) and gets the same rows and the same answers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql import functions as sf
from typer.testing import CliRunner

from groupops.cli import app
from groupops.pipeline import forecast, timelag
from groupops.pipeline.io import parse_input, read_snapshots
from groupops.pipeline.snapshot import CaptureSettings, KafkaSink, ParquetSink, SnapshotCapture, capture_loop

pytestmark = [pytest.mark.pipeline, pytest.mark.integration]

PARTITIONS = 3
ROUNDS = 3
INSTANCE = "worker-0"


def produce(bootstrap: str, topic: str, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for partition in range(PARTITIONS):
        for i in range(per_partition):
            producer.produce(topic, value=b"%d" % i, partition=partition)
    assert producer.flush(30) == 0


@pytest.fixture
def live_group(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Iterator[tuple[str, str]]:
    """A topic with messages and a static member that consumed and committed part of them, kept
    in the group (heartbeating) while the test runs."""
    topic, group = unique_name("orders"), unique_name("orders-processor")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    produce(kafka_bootstrap, topic, 40)
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "group.instance.id": INSTANCE,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    consumed = 0
    deadline = time.monotonic() + 60
    while consumed < 30 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            consumed += 1
    assert consumed == 30
    consumer.commit(asynchronous=False)
    try:
        yield topic, group
    finally:
        consumer.close()


def test_snapshots_land_in_parquet_and_on_the_topic_and_the_pipeline_reads_both(
    spark: SparkSession,
    kafka_bootstrap: str,
    live_group: tuple[str, str],
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topic, group = live_group
    snapshot_topic = unique_name("groupops-snapshots")
    capture = SnapshotCapture(CaptureSettings(bootstrap=kafka_bootstrap, cluster="local", groups=(group,)))
    parquet = ParquetSink(tmp_path / "snapshots")
    kafka = KafkaSink(kafka_bootstrap, snapshot_topic)

    class Both:
        def describe(self) -> str:
            return "both"

        def write(self, rows: list) -> None:  # type: ignore[type-arg]
            parquet.write(rows)
            kafka.write(rows)

        def close(self) -> None:
            kafka.close()

    def between_rounds(_report: object) -> None:
        produce(kafka_bootstrap, topic, 10)  # the log end moves between rounds, the group does not

    reports = capture_loop(capture, Both(), every_s=1.0, count=ROUNDS, on_tick=between_rounds)
    capture.close()
    assert [r.rows for r in reports] == [PARTITIONS] * ROUNDS

    from_parquet = read_snapshots(spark, parse_input(str(tmp_path / "snapshots"), bootstrap=None))
    from_topic = read_snapshots(spark, parse_input(f"kafka://{snapshot_topic}", bootstrap=kafka_bootstrap))
    parquet_rows = sorted(from_parquet.collect())
    topic_rows = sorted(from_topic.collect())
    assert len(parquet_rows) == ROUNDS * PARTITIONS
    assert parquet_rows == topic_rows

    committed = sum(r["committed"] or 0 for r in parquet_rows if r["ts"] == parquet_rows[0]["ts"])
    assert committed == 30
    assert {r["member"] for r in parquet_rows} == {INSTANCE}
    assert {(r["cluster"], r["group"], r["topic"]) for r in parquet_rows} == {("local", group, topic)}
    ends = sorted(
        {(r["ts"], sum(x["log_end"] for x in parquet_rows if x["ts"] == r["ts"])) for r in parquet_rows}
    )
    assert [end for _, end in ends] == [3 * 40 + 3 * 10 * i for i in range(ROUNDS)]

    for frame in (from_parquet, from_topic):
        lags = timelag.timelag(frame)
        newest = lags.where(sf.col("ts") == lags.agg(sf.max("ts")).first()[0]).collect()  # type: ignore[index]
        assert sum(r["lag"] for r in newest) == 3 * 40 + 3 * 10 * (ROUNDS - 1) - 30
        assert all(r["time_lag_s"] is not None and r["time_lag_s"] > 0 for r in newest)
        statuses = {r["status"] for r in forecast.forecast(frame, window_s=600, horizon_s=60).collect()}
        assert statuses == {"STALL"}  # an owner, lag, and a committed offset that never moves


def test_groupops_snapshot_command_appends_rounds(
    kafka_bootstrap: str, live_group: tuple[str, str], tmp_path: Path, spark: SparkSession
) -> None:
    _, group = live_group
    target = tmp_path / "cli-snapshots"
    result = CliRunner().invoke(
        app,
        [
            "snapshot",
            "--bootstrap",
            kafka_bootstrap,
            "--group",
            group,
            "--to",
            str(target),
            "--every",
            "1s",
            "--count",
            "2",
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    rounds = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["round"] for r in rounds] == [1, 2]
    assert all(r["groups"] == 1 and r["rows"] == PARTITIONS for r in rounds)
    frame = read_snapshots(spark, parse_input(str(target), bootstrap=None))
    assert frame.count() == 2 * PARTITIONS
    assert len(list(target.glob("date=*/*.parquet"))) == 2


def test_snapshot_command_rejects_a_bad_target(kafka_bootstrap: str) -> None:
    result = CliRunner().invoke(
        app, ["snapshot", "--bootstrap", kafka_bootstrap, "--to", "kafka://", "--count", "1"]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ") and "(--to)" in result.stderr
