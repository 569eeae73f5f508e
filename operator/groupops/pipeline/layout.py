"""The snapshot dataset's compacted layout: whole dates rewritten as buckets of (cluster, topic,
partition), so that every job reads them without a shuffle (docs/pipeline.md "Compacting";
docs/design.md §10).

`groupops snapshot` writes one small file per capture round; a day at 10 s holds 8,640 of them,
each with every partition at one moment. Every job then shuffles all rows by partition before
its window (the exchange is most of `timelag` and `forecast`, benchmarks/RESULTS.md). `compact`
rewrites the dates whose day has ended (plus `settle`) into `buckets` files per date, row `r` in
file `pmod(murmur3(cluster, topic, partition), buckets)` — Spark's own bucketing, written by its
bucketed writer, each file sorted by (cluster, topic, partition, ts). `read_compacted` registers
the compacted dates as a bucketed table, which Spark reads as already hash-partitioned by those
keys: a window over (cluster, topic, partition) or finer needs no exchange. Dates not compacted
yet are read as before and hash-partitioned the same way, so only they are shuffled.

On disk:

    root/_groupops_layout.json          {"buckets": N, "keys": [...], "sorted_by": [...]}
    root/date=D/_groupops_compacted.json {"buckets": N, "rows": R, "files": [...]}
    root/date=D/part-…_0000b.c000.snappy.parquet   (one per bucket b that has rows)

A date counts as compacted only if its own marker names the dataset's bucket count and every
visible file in it is one of the marker's: a capture file that arrived later (a late snapshot of
that day) makes the date a plain one again, read correctly and compacted again by the next run.
Spark and pyarrow ignore names starting with `_`, so other readers see the same rows.

Nothing is lost on a crash: the new files are written under `root/_compacting/`, counted per date
against the rows read, and only then is `_compacting/_ready.json` written (the dates and the
files each replaced). The swap of a date moves `date=D` to `root/_replaced/date=D`, moves the
staged `date=D` in, moves back any file that was not among those read (it arrived during the
run), then deletes the replaced files. Every step is a rename that a rerun repeats or skips:
`recover` finishes a swap that has a ready file and discards a staging that has none, and every
`compact` starts with it. Two compactions of one dataset at once are refused (`flock` on
`root/_groupops_compact.lock`): the second would take the first one's staging for a crashed one.

Errors: LayoutError (a PipelineInputError) names the option or path.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from groupops.pipeline.frames import TOPIC_PARTITION_KEYS
from groupops.pipeline.io import DATE_COLUMN, PipelineInputError, dataset_dates
from groupops.pipeline.schema import spark_schema

__all__ = [
    "BUCKET_KEYS",
    "DEFAULT_BUCKETS",
    "MAX_BUCKETS",
    "CompactResult",
    "DatasetLayout",
    "LayoutError",
    "compact",
    "compacted_dates",
    "read_compacted",
    "read_layout",
    "recover",
    "tables_released",
]

log = logging.getLogger(__name__)

BUCKET_KEYS = TOPIC_PARTITION_KEYS
"""Every job's windows are over these keys or finer (`forecast` adds the group)."""
SORTED_BY = (*BUCKET_KEYS, "ts")
DEFAULT_BUCKETS = 16
MAX_BUCKETS = 10_000
LAYOUT_FILE = "_groupops_layout.json"
DATE_MARKER = "_groupops_compacted.json"
STAGING = "_compacting"
REPLACED = "_replaced"
READY = "_ready.json"
LOCK_FILE = "_groupops_compact.lock"
# Spark's bucketed writer names a file part-<task>-<job uuid>_<bucket %05d>.c<file %03d>…
_BUCKET_FILE = re.compile(r"^part-.*_(\d{5})\.c\d{3}(\..*)?$")
# The tables `read_compacted` registers inside `tables_released`, which drops them.
_READ_TABLES: ContextVar[list[str] | None] = ContextVar("groupops_read_tables", default=None)


class LayoutError(PipelineInputError):
    """The dataset cannot be compacted or read as compacted; `where` names the option or path."""


@dataclass(frozen=True, slots=True)
class DatasetLayout:
    """The root marker: how compacted dates are bucketed."""

    buckets: int
    keys: tuple[str, ...] = BUCKET_KEYS
    sorted_by: tuple[str, ...] = SORTED_BY


@dataclass(slots=True)
class CompactResult:
    """What `compact` did: the dates rewritten, their rows, files before and after."""

    dates: list[str] = field(default_factory=list)
    rows: int = 0
    files_before: int = 0
    files_after: int = 0
    recovered: list[str] = field(default_factory=list)


def _visible(directory: Path) -> list[str]:
    """The data files Spark reads in a date directory (it skips names starting with `_` or `.`)."""
    return sorted(p.name for p in directory.iterdir() if p.is_file() and not p.name.startswith(("_", ".")))


def _write_json(path: Path, value: object) -> None:
    hidden = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    hidden.write_text(json.dumps(value, indent=1, sort_keys=True))
    os.replace(hidden, path)


def read_layout(root: Path) -> DatasetLayout | None:
    """The dataset's layout marker, or None when it was never compacted."""
    marker = root / LAYOUT_FILE
    if not marker.is_file():
        return None
    try:
        value = json.loads(marker.read_text())
        layout = DatasetLayout(
            buckets=int(value["buckets"]), keys=tuple(value["keys"]), sorted_by=tuple(value["sorted_by"])
        )
    except (ValueError, KeyError, TypeError) as e:
        raise LayoutError(f"unreadable layout marker: {e}", str(marker)) from None
    if layout.keys != BUCKET_KEYS or not 1 <= layout.buckets <= MAX_BUCKETS:
        raise LayoutError(
            f"layout marker of another kind: buckets {layout.buckets} by {list(layout.keys)}, "
            f"this version reads 1..{MAX_BUCKETS} buckets by {list(BUCKET_KEYS)}",
            str(marker),
        )
    return layout


def _date_dir(root: Path, day: date) -> Path:
    return root / f"{DATE_COLUMN}={day.isoformat()}"


def _is_compacted(directory: Path, buckets: int) -> bool:
    marker = directory / DATE_MARKER
    if not marker.is_file():
        return False
    try:
        value = json.loads(marker.read_text())
        listed = sorted(value["files"])
        stated = int(value["buckets"])
    except (ValueError, KeyError, TypeError):
        return False
    files = _visible(directory)
    return stated == buckets and files == listed and all(_BUCKET_FILE.match(name) for name in files)


def compacted_dates(root: Path, layout: DatasetLayout | None) -> list[date]:
    """The dates read as buckets: each holds exactly the files its compaction wrote."""
    if layout is None:
        return []
    return [day for day in dataset_dates(root) if _is_compacted(_date_dir(root, day), layout.buckets)]


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def read_compacted(spark: SparkSession, root: Path, layout: DatasetLayout, days: Sequence[date]) -> DataFrame:
    """The rows of the compacted `days` as a bucketed table (partitioned by its keys, no exchange
    needed), every column of the dataset plus `date`. The table is an external table of the
    session's catalog with a name of its own, holding only those dates' partitions."""
    table = f"groupops_snapshots_{uuid.uuid4().hex}"
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in spark_schema().fields)
    spark.sql(
        f"CREATE TABLE {table} ({columns}, `{DATE_COLUMN}` DATE) USING parquet "
        f"PARTITIONED BY (`{DATE_COLUMN}`) "
        f"CLUSTERED BY ({', '.join(f'`{k}`' for k in layout.keys)}) "
        f"SORTED BY ({', '.join(f'`{k}`' for k in layout.sorted_by)}) INTO {layout.buckets} BUCKETS "
        f"LOCATION {_sql_string(str(root.resolve()))}"
    )
    partitions = " ".join(
        f"PARTITION (`{DATE_COLUMN}` = DATE {_sql_string(day.isoformat())}) "
        f"LOCATION {_sql_string(str(_date_dir(root, day).resolve()))}"
        for day in days
    )
    spark.sql(f"ALTER TABLE {table} ADD {partitions}")
    registered = _READ_TABLES.get()
    if registered is not None:
        registered.append(table)
    return spark.table(table)


@contextlib.contextmanager
def tables_released(spark: SparkSession) -> Iterator[None]:
    """Drops, on the way out, the catalog tables that `read_compacted` registered inside: a job's
    reads. A long-lived session (a Spark Connect server, a notebook) would otherwise keep one
    table per read. The tables are external, so dropping one leaves its files (and the dataset)
    as they are; a frame read inside cannot be used after it."""
    registered: list[str] = []
    token = _READ_TABLES.set(registered)
    try:
        yield
    finally:
        _READ_TABLES.reset(token)
        for table in registered:
            try:
                spark.sql(f"DROP TABLE IF EXISTS {table}")
            except Exception as e:  # the job's own outcome (or error) must not be hidden by this
                log.warning("could not drop the catalog table %s of a compacted read: %s", table, e)


# -- compaction -----------------------------------------------------------------------------------


def _move_files(source: Path, target: Path, names: Iterable[str]) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        os.replace(source / name, target / name)


def _swap(root: Path, day: str, read: Sequence[str]) -> None:
    """Put the staged files of `day` in place of the `read` files; idempotent (see the docstring)."""
    name = f"{DATE_COLUMN}={day}"
    live, staged, replaced = root / name, root / STAGING / name, root / REPLACED / name
    if staged.is_dir():
        if not replaced.is_dir() and live.is_dir():
            (root / REPLACED).mkdir(exist_ok=True)
            live.rename(replaced)
        if live.exists():
            # A capture made the date again after the move: the staged files go in beside its file.
            _move_files(staged, live, [p.name for p in staged.iterdir()])
            staged.rmdir()
        else:
            staged.rename(live)
    if replaced.is_dir():
        arrived = sorted(set(_visible(replaced)).difference(read))
        _move_files(replaced, live, arrived)
        shutil.rmtree(replaced)


def recover(root: Path) -> list[str]:
    """Finish an interrupted compaction (a ready staging) or discard it (none); the dates finished."""
    staging = root / STAGING
    ready = staging / READY
    finished = []
    if ready.is_file():
        plan = json.loads(ready.read_text())
        for day, read in sorted(plan["dates"].items()):
            _swap(root, day, read)
            finished.append(day)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(root / REPLACED, ignore_errors=True)
    return finished


def compact(
    spark: SparkSession,
    root: Path,
    *,
    buckets: int = DEFAULT_BUCKETS,
    before: date,
    since: date | None = None,
) -> CompactResult:
    """Rewrite every date of the dataset older than `before` (and not older than `since`) that is
    not compacted with `buckets` yet; a dataset compacted with another count has every date
    rewritten (a table has one count)."""
    if not 1 <= buckets <= MAX_BUCKETS:
        raise LayoutError(f"must be 1..{MAX_BUCKETS}, got {buckets}", "--buckets")
    if not root.is_dir():
        raise LayoutError("no such dataset directory", str(root))
    with _exclusive(root):
        return _compact(spark, root, buckets=buckets, before=before, since=since)


@contextlib.contextmanager
def _exclusive(root: Path) -> Iterator[None]:
    """One compaction of a dataset at a time: a second one would swap the first one's staging."""
    with open(root / LOCK_FILE, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LayoutError("another compaction of this dataset is running", str(root)) from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _compact(
    spark: SparkSession, root: Path, *, buckets: int, before: date, since: date | None
) -> CompactResult:
    result = CompactResult(recovered=recover(root))
    days = dataset_dates(root)
    if not days:
        raise LayoutError(f"not a snapshot dataset partitioned by {DATE_COLUMN}=yyyy-mm-dd", str(root))
    layout = read_layout(root)
    done = set(compacted_dates(root, layout)) if layout is not None and layout.buckets == buckets else set()
    chosen = [d for d in days if d < before and (since is None or d >= since) and d not in done]
    if not chosen:
        return result
    read = {d.isoformat(): _visible(_date_dir(root, d)) for d in chosen}
    files = [str(_date_dir(root, d) / name) for d in chosen for name in read[d.isoformat()]]
    result.files_before = len(files)
    if not files:
        return result
    schema = spark_schema()
    rows = spark.read.option("basePath", str(root)).parquet(*files)
    rows = rows.select(*[sf.col(f.name).cast(f.dataType) for f in schema.fields], sf.col(DATE_COLUMN))
    staging = root / STAGING
    table = f"groupops_compacting_{uuid.uuid4().hex}"
    # One task per bucket (the same hash as the bucket id): one file per bucket and date.
    (
        rows.repartition(buckets, *BUCKET_KEYS)
        .write.partitionBy(DATE_COLUMN)
        .bucketBy(buckets, *BUCKET_KEYS)
        .sortBy(*SORTED_BY)
        .option("path", str(staging.resolve()))
        .saveAsTable(table)
    )
    spark.sql(f"DROP TABLE {table}")  # external: the files stay
    written = spark.read.parquet(str(staging)).groupBy(DATE_COLUMN).count().collect()
    expected = rows.groupBy(DATE_COLUMN).count().collect()
    counts = {str(r[DATE_COLUMN]): int(r["count"]) for r in written}
    wanted = {str(r[DATE_COLUMN]): int(r["count"]) for r in expected}
    if counts != wanted:
        shutil.rmtree(staging, ignore_errors=True)
        raise LayoutError(f"the compacted rows per date {counts} differ from those read {wanted}", str(root))
    for day, count in wanted.items():
        directory = staging / f"{DATE_COLUMN}={day}"
        _write_json(
            directory / DATE_MARKER, {"buckets": buckets, "rows": count, "files": _visible(directory)}
        )
        result.files_after += len(_visible(directory))
    _write_json(
        root / LAYOUT_FILE, {"buckets": buckets, "keys": list(BUCKET_KEYS), "sorted_by": list(SORTED_BY)}
    )
    _write_json(staging / READY, {"dates": {day: read[day] for day in wanted}})
    for day in sorted(wanted):
        _swap(root, day, read[day])
    shutil.rmtree(staging)  # the ready file last: every date is swapped
    shutil.rmtree(root / REPLACED, ignore_errors=True)
    result.dates = sorted(wanted)
    result.rows = sum(wanted.values())
    return result
