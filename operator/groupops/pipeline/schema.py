"""The offset-snapshot record: the one input of every pipeline job, in its three forms.

One row is what the broker knew about one partition for one group at one moment:

    column     type                  meaning
    ts         timestamp (UTC, µs)   when the offsets were read
    cluster    string                a name for the Kafka cluster (default: its bootstrap address)
    group      string                consumer group id
    topic      string
    partition  int32
    log_start  int64                 first offset still in the partition
    log_end    int64                 offset the next produced message will get
    committed  int64, nullable       the group's committed offset; null when never committed
    member     string, nullable      member owning the partition at `ts` (group.instance.id when
                                     static, else client id/member id); "" when no member owns it;
                                     null when the capture did not look at membership
    date       string (yyyy-mm-dd)   Parquet only: the partition directory `date=...` (UTC date of ts)

Forms: a Parquet dataset partitioned by `date` (pyarrow writes it, Spark reads it), one JSON
object per Kafka message (`ts` as seconds since the epoch, a number; see `to_json`), and the Spark
DataFrame every transform takes (`spark_schema`). This module imports neither pyspark nor pyarrow
at import time so that the capture side stays light.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from groupops.lag.history import KAFKA_SCHEME, SnapshotRow, from_json, to_json

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = [
    "COLUMNS",
    "JSON_SCHEMA",
    "KAFKA_SCHEME",
    "SnapshotRow",
    "arrow_schema",
    "from_json",
    "json_value_schema",
    "kafka_target",
    "spark_schema",
    "to_json",
    "utc_date",
]

COLUMNS: tuple[str, ...] = (
    "ts",
    "cluster",
    "group",
    "topic",
    "partition",
    "log_start",
    "log_end",
    "committed",
    "member",
)


JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "groupops offset snapshot",
    "description": "One partition of one consumer group at one moment; one object per Kafka message.",
    "type": "object",
    "required": ["ts", "cluster", "group", "topic", "partition", "log_start", "log_end", "committed"],
    "additionalProperties": False,
    "properties": {
        "ts": {"type": "number", "description": "seconds since the Unix epoch (UTC), fractional"},
        "cluster": {"type": "string"},
        "group": {"type": "string"},
        "topic": {"type": "string"},
        "partition": {"type": "integer", "minimum": 0},
        "log_start": {"type": "integer", "minimum": 0},
        "log_end": {"type": "integer", "minimum": 0},
        "committed": {"type": ["integer", "null"], "description": "null: the group never committed"},
        "member": {
            "type": ["string", "null"],
            "description": "owner at ts; empty string: no owner; null or absent: membership not read",
        },
    },
}


def kafka_target(text: str, *, bootstrap: str | None) -> tuple[str, str] | None:
    """`kafka://topic` → (bootstrap, topic); `kafka://host:port[,...]/topic` → (those brokers,
    topic); anything else (a path) → None. Either part may come back empty: callers say which."""
    if not text.startswith(KAFKA_SCHEME):
        return None
    servers, _, topic = text[len(KAFKA_SCHEME) :].rpartition("/")
    return servers or (bootstrap or ""), topic


def utc_date(ts: float) -> str:
    """`yyyy-mm-dd` of a timestamp in UTC: the Parquet partition value."""
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d")


def arrow_schema() -> pa.Schema:
    """The Parquet file schema (without the `date` partition column, which is the directory)."""
    import pyarrow as pa  # noqa: PLC0415  (capture-side only; kept off the import path)

    return pa.schema(
        [
            pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("cluster", pa.string(), nullable=False),
            pa.field("group", pa.string(), nullable=False),
            pa.field("topic", pa.string(), nullable=False),
            pa.field("partition", pa.int32(), nullable=False),
            pa.field("log_start", pa.int64(), nullable=False),
            pa.field("log_end", pa.int64(), nullable=False),
            pa.field("committed", pa.int64(), nullable=True),
            pa.field("member", pa.string(), nullable=True),
        ]
    )


def spark_schema() -> StructType:
    """The DataFrame schema every transform takes (nullable as Spark reads Parquet)."""
    from pyspark.sql import types as st  # noqa: PLC0415  (the capture side runs without Spark)

    return st.StructType(
        [
            st.StructField("ts", st.TimestampType()),
            st.StructField("cluster", st.StringType()),
            st.StructField("group", st.StringType()),
            st.StructField("topic", st.StringType()),
            st.StructField("partition", st.IntegerType()),
            st.StructField("log_start", st.LongType()),
            st.StructField("log_end", st.LongType()),
            st.StructField("committed", st.LongType()),
            st.StructField("member", st.StringType()),
        ]
    )


def json_value_schema() -> StructType:
    """The schema `from_json` applies to a Kafka message value in Spark (`ts` as a number)."""
    from pyspark.sql import types as st  # noqa: PLC0415  (the capture side runs without Spark)

    fields = [
        st.StructField("ts", st.DoubleType()) if field.name == "ts" else field
        for field in spark_schema().fields
    ]
    return st.StructType(fields)
