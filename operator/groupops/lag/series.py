"""From the partitions a lag exporter reports to a snapshot of every partition, counted by Kafka.

Who calls it: the HTTP sources (lag/prometheus.py, lag/burrow.py), once per read, after their
request.

kafka_exporter, KMinion, kafka-lag-exporter and Burrow report a partition only once the group has
committed an offset on it, so the highest partition they report says nothing about how many a
topic has, and a group that never committed has no series at all. The partition counts come from
the Kafka cluster's metadata instead (`SourceContext.partition_counts`: the operator's shared
per-cluster readers; without it, a connection of the source's own for one DescribeTopics). Then,
for the topics of the read:

1. a topic that exists gets one lag per partition 0..count-1: its series' value, else 0;
2. a series for a partition at or beyond the count is left out (a topic recreated with fewer
   partitions, or metadata a few seconds older than the exporter's scrape);
3. a topic with no series at all is listed in `topics_without_series` (planned with lag 0, and
   reported as `NoLagSeries`): a new group, or one the exporter does not see;
4. a topic that does not exist is listed in `missing_topics`; when none exists the counts raise
   UnknownTopicError.

Example: series {orders: {0: 5, 2: 7, 9: 1}}, counts {orders: 4, audit: 2}, topics [orders, audit,
gone] -> lags {orders: (5, 0, 7, 0), audit: (0, 0)}, topics_without_series (audit,),
missing_topics (gone,).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from groupops.lag.base import LagAuthorizationError, LagSnapshot, LagSourceConfigError, LagSourceUnavailable

if TYPE_CHECKING:
    from groupops.lag.registry import SourceContext

__all__ = ["Series", "partition_counts", "snapshot_from_series"]

log = logging.getLogger(__name__)

Series = Mapping[str, Mapping[int, int]]
"""topic -> partition -> lag, for the partitions the exporter has a series for."""


def snapshot_from_series(
    group_id: str, topics: Sequence[str], series: Series, counts: Mapping[str, int]
) -> LagSnapshot:
    """The snapshot of `topics` by the module docstring's four rules."""
    lags: dict[str, tuple[int, ...]] = {}
    without_series: list[str] = []
    for topic in topics:
        count = counts.get(topic)
        if count is None:
            continue
        reported = series.get(topic) or {}
        beyond = sorted(p for p in reported if p >= count)
        if beyond:
            log.debug("%s: series of %s partitions %s beyond its %d left out", group_id, topic, beyond, count)
        lags[topic] = tuple(max(0, reported.get(p, 0)) for p in range(count))
        if not reported:
            without_series.append(topic)
    return LagSnapshot(
        group_id=group_id,
        taken_at=time.time(),
        lags=lags,
        missing_topics=tuple(sorted(set(topics) - counts.keys())),
        topics_without_series=tuple(without_series),
    )


def partition_counts(context: SourceContext, topics: Sequence[str]) -> Mapping[str, int]:
    """Partition counts of `topics` from the policy's Kafka cluster: the context's provider, else
    one DescribeTopics on a connection made for it (confluent-kafka imported only then). Errors
    keep their kind and say they came from Kafka, not from the lag source."""
    if context.partition_counts is not None:
        counter = context.partition_counts
        return _from_kafka(lambda: counter(topics))
    from groupops.lag import kafka  # noqa: PLC0415 - confluent-kafka only when there is no provider

    def one_off() -> Mapping[str, int]:
        source = kafka.from_spec({}, context)
        try:
            return source.partition_counts(topics)
        finally:
            source.close()

    return _from_kafka(one_off)


def _from_kafka(read: Callable[[], Mapping[str, int]]) -> Mapping[str, int]:
    try:
        return read()
    except LagSourceConfigError as e:
        raise LagSourceConfigError(f"partition counts from Kafka: {e}") from e
    except LagAuthorizationError as e:
        raise LagAuthorizationError(f"partition counts from Kafka: {e}") from e
    except LagSourceUnavailable as e:
        raise LagSourceUnavailable(f"partition counts from Kafka: {e}") from e
