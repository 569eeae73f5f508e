"""The snapshot record in its forms (JSON message, Parquet dataset read back by Spark), the sink
targets, and the Kafka-connector resolution the session uses."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from groupops.lag.base import PartitionOffsets
from groupops.lag.kafka import GroupOffsets
from groupops.model import TopicPartition
from groupops.pipeline import session
from groupops.pipeline.io import parse_input, read_snapshots, rows_from_json_values
from groupops.pipeline.schema import COLUMNS, JSON_SCHEMA, SnapshotRow, from_json, to_json
from groupops.pipeline.snapshot import ParquetSink, SnapshotTargetError, open_sink, rows_from_offsets

pytestmark = pytest.mark.pipeline

ROW = SnapshotRow(
    ts=1767225600.25,
    cluster="prod",
    group="orders",
    topic="orders",
    partition=3,
    log_start=10,
    log_end=120,
    committed=None,
    member="",
)


def test_json_message_round_trips_and_matches_the_documented_schema() -> None:
    assert from_json(to_json(ROW)) == ROW
    assert list(JSON_SCHEMA["properties"]) == list(COLUMNS)
    assert set(JSON_SCHEMA["required"]) == set(COLUMNS) - {"member"}


def test_rows_from_offsets_mark_unowned_and_unknown_membership() -> None:
    offsets = GroupOffsets(
        group_id="orders",
        group_known=True,
        group_state="Stable",
        taken_at=ROW["ts"],
        partitions={"orders": 2},
        partition_racks={},
        offsets={
            TopicPartition("orders", 1): PartitionOffsets(log_start=0, log_end=9, committed=4),
            TopicPartition("orders", 0): PartitionOffsets(log_start=0, log_end=7, committed=None),
        },
    )
    owned = rows_from_offsets(offsets, cluster="c", owners={TopicPartition("orders", 1): "w-1"})
    assert [(r["partition"], r["committed"], r["member"]) for r in owned] == [(0, None, ""), (1, 4, "w-1")]
    unknown = rows_from_offsets(offsets, cluster="c", owners=None)
    assert [r["member"] for r in unknown] == [None, None]


def test_parquet_sink_appends_a_dated_dataset_spark_reads(spark: SparkSession, tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path / "snapshots")
    sink.write([ROW, {**ROW, "partition": 4, "committed": 100, "member": "w-1"}])
    sink.write([{**ROW, "ts": ROW["ts"] + 86_400}])
    files = sorted(
        p.relative_to(tmp_path / "snapshots").parts[0] for p in (tmp_path / "snapshots").rglob("*.parquet")
    )
    assert files == ["date=2026-01-01", "date=2026-01-02"]  # one file per date and write
    assert not list((tmp_path / "snapshots").rglob(".*"))  # no hidden leftovers
    rows = read_snapshots(spark, parse_input(str(tmp_path / "snapshots"), bootstrap=None)).orderBy(
        "ts", "partition"
    )
    got = [row.asDict() for row in rows.collect()]
    assert [r["ts"].timestamp() for r in got] == [ROW["ts"], ROW["ts"], ROW["ts"] + 86_400]
    assert [(r["partition"], r["committed"], r["member"]) for r in got] == [
        (3, None, ""),
        (4, 100, "w-1"),
        (3, None, ""),
    ]
    assert list(got[0]) == list(COLUMNS)


def test_json_rows_and_parquet_rows_agree_to_the_microsecond(spark: SparkSession, tmp_path: Path) -> None:
    # x.5 microseconds exactly: Python's round (ParquetSink) goes to even, Spark's round goes up
    halves = [1763748814.6661545, 1767225600.0000025, 1767225600.0000035]
    assert [(ts * 1_000_000) % 1 for ts in halves] == [0.5, 0.5, 0.5]
    rows = [SnapshotRow(**{**ROW, "ts": ts, "partition": i}) for i, ts in enumerate(halves)]
    ParquetSink(tmp_path / "snapshots").write(rows)
    from_parquet = read_snapshots(spark, parse_input(str(tmp_path / "snapshots"), bootstrap=None))
    values = spark.createDataFrame([(to_json(row).decode(),) for row in rows], "value string")
    from_json_values = rows_from_json_values(values)
    assert sorted(from_parquet.collect()) == sorted(from_json_values.collect())
    assert [r["ts"].microsecond for r in from_json_values.orderBy("partition").collect()] == [666154, 2, 4]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        pytest.param("kafka://", "no topic", id="no-topic"),
        pytest.param("kafka://snapshots", "no brokers", id="no-brokers"),
        pytest.param("  ", "empty target", id="blank"),
    ],
)
def test_bad_sink_targets_are_named(target: str, message: str) -> None:
    with pytest.raises(SnapshotTargetError, match=message):
        open_sink(target, bootstrap=None)


def test_connector_follows_pyspark_unless_maven_central_lacks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROUPOPS_SPARK_KAFKA_VERSION", raising=False)
    assert session.kafka_connector("4.2.0") == session.KafkaConnector("4.2.0")
    pinned = session.kafka_connector("4.3.0")
    assert pinned == session.KafkaConnector("4.2.0", token_provider="4.0.0")
    assert pinned.coordinate == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
    monkeypatch.setenv("GROUPOPS_SPARK_KAFKA_VERSION", "4.1.3")
    assert session.kafka_connector("4.3.0") == session.KafkaConnector("4.1.3")


def test_ivy_settings_pin_only_the_token_provider() -> None:
    plain = ET.fromstring(session.ivy_settings(session.KafkaConnector("4.2.0")))
    assert plain.find("namespaces") is None
    assert plain.find("resolvers/ibiblio").attrib == {"name": "central", "m2compatible": "true"}  # type: ignore[union-attr]
    pinned = ET.fromstring(session.ivy_settings(session.KafkaConnector("4.2.0", token_provider="4.0.0")))
    rule = pinned.find("namespaces/namespace/rule")
    assert rule is not None
    src, dest = rule.find("fromsystem/src"), rule.find("fromsystem/dest")
    assert src is not None and dest is not None
    assert (src.get("module"), src.get("rev"), dest.get("rev")) == (
        session.TOKEN_PROVIDER_ARTIFACT,
        "4.2.0",
        "4.0.0",
    )
    assert pinned.find("resolvers/ibiblio").get("namespace") == "pinned"  # type: ignore[union-attr]
