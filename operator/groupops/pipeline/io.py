"""Reading snapshots and writing job outputs: only the job entry points call this.

Sources (`read_snapshots`):
- a directory: the Parquet dataset `groupops snapshot --to DIR` writes (partitioned by date);
- `kafka://topic` (brokers from `bootstrap`) or `kafka://host:port/topic`: every message of the
  topic from the earliest offset to the latest, through Spark's Kafka source, each value parsed
  with the snapshot JSON schema (groupops.pipeline.schema); values that are not snapshot JSON
  are dropped.
Outputs are Parquet directories, replaced on every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from groupops.pipeline.schema import COLUMNS, json_value_schema, kafka_target, spark_schema

__all__ = [
    "InputSpec",
    "PipelineInputError",
    "parse_input",
    "read_snapshots",
    "rows_from_json_values",
    "write_parquet",
]


class PipelineInputError(ValueError):
    """The input cannot be read: `where` names the option or path."""

    def __init__(self, message: str, where: str) -> None:
        super().__init__(f"{message} ({where})")
        self.message = message
        self.where = where


@dataclass(frozen=True, slots=True)
class InputSpec:
    """A parsed --input: a Parquet directory, or a Kafka topic on some brokers."""

    path: Path | None = None
    topic: str | None = None
    bootstrap: str | None = None

    @property
    def is_kafka(self) -> bool:
        return self.topic is not None


def parse_input(text: str, *, bootstrap: str | None) -> InputSpec:
    """`DIR`, `kafka://topic` (with --bootstrap) or `kafka://host:port/topic`."""
    kafka = kafka_target(text, bootstrap=bootstrap)
    if kafka is not None:
        servers, topic = kafka
        if not topic:
            raise PipelineInputError("no topic: write kafka://topic or kafka://host:port/topic", "--input")
        if not servers:
            raise PipelineInputError(f"no brokers for {text}: give --bootstrap", "--input")
        return InputSpec(topic=topic, bootstrap=servers)
    path = Path(text)
    if not path.is_dir():
        raise PipelineInputError(f"no snapshot dataset at {path}", "--input")
    return InputSpec(path=path)


def read_snapshots(spark: SparkSession, source: InputSpec) -> DataFrame:
    """Snapshot rows with exactly the columns of groupops.pipeline.schema.COLUMNS."""
    if source.topic is not None:
        raw = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", source.bootstrap)
            .option("subscribe", source.topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        return rows_from_json_values(raw.select(sf.col("value").cast("string").alias("value")))
    schema = spark_schema()
    frame = spark.read.option("basePath", str(source.path)).parquet(str(source.path))
    return frame.select(*[sf.col(field.name).cast(field.dataType) for field in schema.fields])


def rows_from_json_values(values: DataFrame) -> DataFrame:
    """Snapshot rows from a frame with one string column `value` holding KafkaSink's JSON rows.

    `ts` (float seconds) becomes whole microseconds rounded half to even, as ParquetSink's Python
    `round` does: Spark's `round` rounds half up and would put the same row a microsecond apart."""
    parsed = values.select(sf.from_json(sf.col("value"), json_value_schema()).alias("row"))
    rows = parsed.select("row.*").where(sf.col("ts").isNotNull() & sf.col("group").isNotNull())
    micros = sf.bround(sf.col("ts") * 1_000_000).cast("long")
    return rows.withColumn("ts", sf.timestamp_micros(micros)).select(*COLUMNS)


def write_parquet(frame: DataFrame, path: Path) -> int:
    """Write (replacing) and return the row count of what was written."""
    frame.write.mode("overwrite").parquet(str(path))
    return int(frame.sparkSession.read.parquet(str(path)).count())
