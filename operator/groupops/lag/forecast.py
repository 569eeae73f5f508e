"""The `forecast` lag source: lag where the Spark pipeline says it is going, not where it was.

Who calls it: the operator's lag step for `lagSource: {type: forecast, forecast: {path: ...}}`,
and `groupops lag`. It reads the Parquet output of `groupops pipeline forecast` (a directory, on
a volume the pipeline and the operator share) with pyarrow; no Spark here.

`read(group, topics)` takes, for each partition of the group, the newest row and reports its
`forecast_lag` (the lag expected `horizon_s` after the snapshot). A topic the output does not have
for that group is an UnknownTopicError (as the Kafka source would say); output older than
`maxAgeSeconds` is LagSourceUnavailable: planning on a stale forecast is worse than on no lag.

Spec (`lagSource.forecast`): `path` (required), `cluster` (when the output holds several
clusters), `maxAgeSeconds` (default 900: three forecast runs at a 5-minute schedule).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from groupops.lag.base import (
    LagSnapshot,
    LagSourceConfigError,
    LagSourceUnavailable,
    UnknownTopicError,
)

__all__ = ["FORECAST_COLUMNS", "ForecastLagSource", "from_spec"]

TYPE = "forecast"

FORECAST_COLUMNS: tuple[str, ...] = (
    "cluster",
    "group",
    "topic",
    "partition",
    "ts",
    "member",
    "lag",
    "produce_rate",
    "consume_rate",
    "horizon_s",
    "window_s",
    "forecast_lag",
    "status",
    "samples",
)
"""The columns `groupops pipeline forecast` writes, in order (docs/pipeline.md has their types)."""

_DEFAULT_MAX_AGE_S = 900.0


class ForecastLagSource:
    """Reads forecast lag for a group from the pipeline's Parquet output at `path`."""

    def __init__(
        self, path: Path, *, cluster: str | None = None, max_age_s: float | None = _DEFAULT_MAX_AGE_S
    ) -> None:
        self.path = path
        self.cluster = cluster
        self.max_age_s = max_age_s

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot:
        table = self._rows(group_id)
        newest: dict[tuple[str, int], tuple[float, int]] = {}
        for topic, partition, ts, lag in zip(
            table["topic"], table["partition"], table["ts"], table["forecast_lag"], strict=True
        ):
            key = (str(topic), int(partition))
            seen = newest.get(key)
            if seen is None or ts > seen[0]:
                newest[key] = (float(ts), int(lag))
        wanted = list(topics) or sorted({topic for topic, _ in newest})
        if not newest:
            raise UnknownTopicError(f"no forecast for group {group_id!r} in {self.path}")
        taken_at = max(ts for ts, _ in newest.values())
        if self.max_age_s is not None and time.time() - taken_at > self.max_age_s:
            raise LagSourceUnavailable(
                f"forecast for group {group_id!r} in {self.path} is {time.time() - taken_at:.0f} s old "
                f"(maxAgeSeconds {self.max_age_s:g}): is the pipeline's forecast job running?"
            )
        lags: dict[str, list[int]] = {}
        for topic in wanted:
            partitions = sorted(p for t, p in newest if t == topic)
            if not partitions:
                raise UnknownTopicError(
                    f"topic {topic!r} has no forecast for group {group_id!r} in {self.path}"
                )
            values = [0] * (partitions[-1] + 1)
            for p in partitions:
                values[p] = newest[(topic, p)][1]
            lags[topic] = values
        return LagSnapshot(group_id=group_id, taken_at=taken_at, lags=lags)

    def _rows(self, group_id: str) -> dict[str, list[Any]]:
        if not self.path.exists():
            raise LagSourceUnavailable(f"no forecast output at {self.path}: run `groupops pipeline forecast`")
        try:
            dataset = ds.dataset(self.path, format="parquet")
            condition = pc.field("group") == group_id
            if self.cluster is not None:
                condition = condition & (pc.field("cluster") == self.cluster)
            table = dataset.to_table(columns=["topic", "partition", "ts", "forecast_lag"], filter=condition)
        except (OSError, pa.ArrowInvalid) as e:
            raise LagSourceUnavailable(f"cannot read forecast output at {self.path}: {e}") from e
        seconds = pc.divide(pc.cast(pc.cast(table["ts"], pa.timestamp("us")), pa.int64()), 1_000_000.0)
        return {
            "topic": table["topic"].to_pylist(),
            "partition": table["partition"].to_pylist(),
            "ts": seconds.to_pylist(),
            "forecast_lag": table["forecast_lag"].to_pylist(),
        }

    def close(self) -> None:
        """Nothing held between reads."""


def from_spec(spec: Mapping[str, Any], context: object = None) -> ForecastLagSource:
    """Build from `{path, cluster?, maxAgeSeconds?}`; LagSourceConfigError naming the field."""
    del context
    known = {"path", "cluster", "maxAgeSeconds"}
    for key in spec:
        if key not in known:
            raise LagSourceConfigError(
                f"lagSource.forecast.{key}: unknown field; known: {', '.join(sorted(known))}"
            )
    path = spec.get("path")
    if not isinstance(path, str) or not path:
        raise LagSourceConfigError("lagSource.forecast.path: give the directory of the forecast job's output")
    cluster = spec.get("cluster")
    if cluster is not None and not isinstance(cluster, str):
        raise LagSourceConfigError(f"lagSource.forecast.cluster: expected a string, got {cluster!r}")
    max_age = spec.get("maxAgeSeconds", _DEFAULT_MAX_AGE_S)
    if isinstance(max_age, bool) or not isinstance(max_age, int | float) or max_age <= 0:
        raise LagSourceConfigError(
            f"lagSource.forecast.maxAgeSeconds: expected a positive number, got {max_age!r}"
        )
    return ForecastLagSource(Path(path), cluster=cluster, max_age_s=float(max_age))
