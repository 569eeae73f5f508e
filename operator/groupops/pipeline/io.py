"""Reading snapshots and writing job outputs: only the job entry points call this.

Sources (`read_snapshots`):
- a directory: the Parquet dataset `groupops snapshot --to DIR` writes (partitioned by date); the
  dates `groupops pipeline compact` rewrote are read as a bucketed table (groupops.pipeline.layout),
  and in such a dataset the other dates are hash-partitioned as its buckets are, so that no job
  shuffles the compacted rows;
- `kafka://topic` (brokers from `bootstrap`) or `kafka://host:port/topic`: every message of the
  topic from the earliest offset to the latest, through Spark's Kafka source, each value parsed
  with the snapshot JSON schema (groupops.pipeline.schema); values that are not snapshot JSON
  are dropped.
`since` (an incremental run, docs/pipeline.md "Incremental runs") keeps rows with `ts >= since`;
on a Parquet dataset it filters the `date` partition column first, so Spark opens only the files
of those dates (the scan's PartitionFilters; it still lists every directory when it discovers the
partitions), and pushes the `ts` bound into the Parquet reader (PushedFilters: row groups whose
statistics end before it are skipped).

Outputs are Parquet directories. `write_parquet` replaces one; `write_dated` writes a table
partitioned by the UTC date of a time column, replacing either everything or, in an incremental
run, only the dates it wrote (dynamic partition overwrite); `replace_groups` rewrites a small
per-group table with the groups of an incremental run replaced and every other group kept.
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

from groupops.pipeline.schema import COLUMNS, json_value_schema, kafka_target, spark_schema

__all__ = [
    "InputSpec",
    "PipelineInputError",
    "dataset_dates",
    "midnight",
    "parse_input",
    "parse_since",
    "read_snapshots",
    "replace_groups",
    "rows_from_json_values",
    "timestamp_literal",
    "write_dated",
    "write_parquet",
]

DATE_COLUMN = "date"
"""The partition column of the snapshot dataset and of the dated outputs: `date=yyyy-mm-dd`."""


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


def parse_since(text: str) -> datetime:
    """`--since`: a UTC date (`2026-01-04`, its midnight) or an ISO 8601 time
    (`2026-01-04T06:00:00Z`, `2026-01-04 06:00`, `2026-01-04T07:00:00+01:00`; without an offset,
    UTC). Returns an aware UTC datetime; PipelineInputError naming --since when it is neither."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise PipelineInputError(
            f"not a date or time: {text!r}; write a UTC date (2026-01-04) or an ISO 8601 time "
            "(2026-01-04T06:00:00Z)",
            "--since",
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def timestamp_literal(moment: datetime) -> Column:
    """An aware datetime as a Spark timestamp literal (whole microseconds since the epoch, so
    neither the driver's nor the session's time zone can shift it)."""
    return sf.timestamp_micros(sf.lit(round(moment.timestamp() * 1_000_000)))


def midnight(moment: datetime) -> datetime:
    """The start of `moment`'s UTC date."""
    return datetime.combine(moment.astimezone(UTC).date(), time(), tzinfo=UTC)


def dataset_dates(path: Path) -> list[date]:
    """The dates of a Parquet dataset partitioned by `date=yyyy-mm-dd` (its directory names),
    oldest first; [] when the dataset does not exist. Hidden and unparsable directories are left
    out (Spark ignores them too)."""
    if not path.is_dir():
        return []
    found = []
    for child in path.iterdir():
        name = child.name
        if child.is_dir() and name.startswith(f"{DATE_COLUMN}="):
            try:
                found.append(date.fromisoformat(name.split("=", 1)[1]))
            except ValueError:
                continue
    return sorted(found)


def read_snapshots(spark: SparkSession, source: InputSpec, *, since: datetime | None = None) -> DataFrame:
    """Snapshot rows with exactly the columns of groupops.pipeline.schema.COLUMNS; only those at
    or after `since` when given (see the module docstring for what that reads)."""
    bound = None if since is None else timestamp_literal(since)
    if source.topic is not None:
        raw = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", source.bootstrap)
            .option("subscribe", source.topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        rows = rows_from_json_values(raw.select(sf.col("value").cast("string").alias("value")))
        return rows if bound is None else rows.where(sf.col("ts") >= bound)
    # Imported here: layout builds on this module (its errors and dates).
    from groupops.pipeline import layout  # noqa: PLC0415

    root = source.path
    if root is None:
        raise PipelineInputError("neither a directory nor a topic", "--input")
    dataset = layout.read_layout(root)
    if dataset is None:
        return _snapshot_columns(spark.read.option("basePath", str(root)).parquet(str(root)), since)
    first = None if since is None else since.astimezone(UTC).date()
    wanted = [d for d in dataset_dates(root) if first is None or d >= first]
    compacted = sorted(set(layout.compacted_dates(root, dataset)).intersection(wanted))
    plain = sorted(set(wanted).difference(compacted))
    parts = []
    if compacted:
        parts.append(_snapshot_columns(layout.read_compacted(spark, root, dataset, compacted), since))
    if plain:
        directories = [str(root / f"{DATE_COLUMN}={d.isoformat()}") for d in plain]
        rows = _snapshot_columns(spark.read.option("basePath", str(root)).parquet(*directories), since)
        # Partitioned as the buckets are: the union stays partitioned, only these rows move.
        parts.append(rows.repartition(dataset.buckets, *layout.BUCKET_KEYS) if compacted else rows)
    if not parts:
        return spark.createDataFrame([], spark_schema())
    return functools.reduce(DataFrame.unionByName, parts)


def _snapshot_columns(frame: DataFrame, since: datetime | None) -> DataFrame:
    """A read dataset's rows at or after `since`, with exactly the snapshot columns."""
    if since is not None:
        if DATE_COLUMN in frame.columns:
            # The partition filter first: the scan then opens only the files of those dates.
            frame = frame.where(sf.col(DATE_COLUMN) >= sf.lit(since.astimezone(UTC).date()))
        frame = frame.where(sf.col("ts") >= timestamp_literal(since))
    return frame.select(*[sf.col(field.name).cast(field.dataType) for field in spark_schema().fields])


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


def write_dated(frame: DataFrame, path: Path, *, time_column: str, since: datetime | None = None) -> int:
    """Write `frame` partitioned by the UTC date of `time_column` (the session's time zone is UTC).

    since None: the dataset is replaced. Otherwise `frame` must hold only rows at or after
    `since`'s midnight, and only the dates it holds are replaced (`partitionOverwriteMode`
    dynamic): earlier dates stay as an earlier run wrote them. Returns the rows now stored in the
    dates written (all rows on a full write)."""
    dated = frame.withColumn(DATE_COLUMN, sf.to_date(sf.col(time_column)))
    writer = dated.write.mode("overwrite").partitionBy(DATE_COLUMN)
    if since is not None:
        writer = writer.option("partitionOverwriteMode", "dynamic")
    writer.parquet(str(path))
    stored = frame.sparkSession.read.parquet(str(path))
    if since is not None:
        stored = stored.where(sf.col(DATE_COLUMN) >= sf.lit(since.astimezone(UTC).date()))
    return int(stored.count())


def replace_groups(recomputed: DataFrame, path: Path, *, keys: tuple[str, ...]) -> int:
    """Rewrite the table at `path` as its rows of every `keys` value not in `recomputed`, plus
    `recomputed` (the groups an incremental run saw again). Written beside it, then swapped in:
    Spark cannot overwrite a path it is reading. Returns the rows of the new table."""
    spark = recomputed.sparkSession
    table = recomputed
    if (path / "_SUCCESS").is_file():
        previous = spark.read.parquet(str(path))
        kept = previous.join(recomputed.select(*keys).distinct(), list(keys), "left_anti")
        table = kept.unionByName(recomputed.select(*previous.columns))
    staged = path.with_name(f".{path.name}.next")
    table.write.mode("overwrite").parquet(str(staged))
    retired = path.with_name(f".{path.name}.old")
    shutil.rmtree(retired, ignore_errors=True)
    if path.exists():
        path.rename(retired)
    staged.rename(path)
    shutil.rmtree(retired, ignore_errors=True)
    return int(spark.read.parquet(str(path)).count())
