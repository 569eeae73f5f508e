"""`prometheus` lag source: per-partition lag from an exporter's metrics through Prometheus' HTTP API.

Spec (`lagSource.prometheus`): `url` (Prometheus base URL), `exporter` (which exporter's metric
names: kafka_exporter, kminion or kafka-lag-exporter; default kafka_exporter), optional `query`
overriding the exporter's (placeholders `{group}` and `{topics}`, a regex alternation of the
topics), `timeout` in seconds. One instant query: each series must carry a topic and a partition
label; the partition count of a topic is its highest partition label + 1, so a topic with no
series at all is reported as unknown (the exporter has not seen the group consume it).

Steps: parse -> validate (here, at construction) -> query on every `read`.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from groupops.lag.base import LagSnapshot, LagSourceConfigError, UnknownTopicError
from groupops.lag.httpget import get_json, join_url, log_answer

__all__ = ["EXPORTERS", "ExporterQuery", "PrometheusLagSource", "from_spec"]

TYPE = "prometheus"
DEFAULT_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class ExporterQuery:
    """An exporter's lag metric: the PromQL template and the label names of topic and partition."""

    query: str
    topic_label: str
    partition_label: str


EXPORTERS: dict[str, ExporterQuery] = {
    "kafka_exporter": ExporterQuery(
        'max by (topic, partition) (kafka_consumergroup_lag{{consumergroup="{group}", topic=~"{topics}"}})',
        "topic",
        "partition",
    ),
    "kminion": ExporterQuery(
        "max by (topic_name, partition_id) ("
        'kminion_kafka_consumer_group_topic_partition_lag{{group_id="{group}", topic_name=~"{topics}"}})',
        "topic_name",
        "partition_id",
    ),
    "kafka-lag-exporter": ExporterQuery(
        'max by (topic, partition) (kafka_consumergroup_group_lag{{group="{group}", topic=~"{topics}"}})',
        "topic",
        "partition",
    ),
}


class PrometheusLagSource:
    def __init__(self, *, url: str, exporter: ExporterQuery, timeout: float) -> None:
        self._url = url
        self._exporter = exporter
        self._timeout = timeout

    def query_for(self, group_id: str, topics: Sequence[str]) -> str:
        alternation = "|".join(re.escape(topic) for topic in topics)
        return self._exporter.query.format(group=group_id.replace('"', '\\"'), topics=alternation)

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot:
        url = join_url(self._url, "/api/v1/query", {"query": self.query_for(group_id, topics)})
        document = get_json(url, timeout=self._timeout)
        if not isinstance(document, Mapping) or document.get("status") != "success":
            log_answer(self._url, "Prometheus query failed", document)
            kind = document.get("errorType") if isinstance(document, Mapping) else None
            named = f" ({kind})" if isinstance(kind, str) and kind.isidentifier() and len(kind) <= 32 else ""
            raise LagSourceConfigError(
                f"Prometheus query failed{named}: check lagSource.prometheus.query (the operator's log has "
                "Prometheus' answer)"
            )
        found = self._parse(document.get("data"))
        lags: dict[str, tuple[int, ...]] = {}
        for topic in topics:
            per_partition = found.get(topic)
            if not per_partition:
                raise UnknownTopicError(
                    f"no lag series for topic {topic!r} of group {group_id!r} in Prometheus"
                )
            count = max(per_partition) + 1
            lags[topic] = tuple(per_partition.get(p, 0) for p in range(count))
        return LagSnapshot(group_id=group_id, taken_at=time.time(), lags=lags)

    def _parse(self, data: Any) -> dict[str, dict[int, int]]:
        if not isinstance(data, Mapping) or data.get("resultType") != "vector":
            raise LagSourceConfigError("Prometheus query must return an instant vector")
        found: dict[str, dict[int, int]] = {}
        for series in data.get("result") or []:
            labels = series.get("metric", {})
            topic = labels.get(self._exporter.topic_label)
            partition = labels.get(self._exporter.partition_label)
            if topic is None or partition is None or not str(partition).isdigit():
                log_answer(self._url, "series without topic/partition labels", dict(labels))
                raise LagSourceConfigError(
                    f"series without {self._exporter.topic_label}/{self._exporter.partition_label} labels "
                    "(the operator's log has one)"
                )
            value = float(series["value"][1])
            lag = 0 if math.isnan(value) or value < 0 else int(value)  # NaN or a negative gauge reads as 0
            found.setdefault(str(topic), {})[int(partition)] = lag
        return found

    def close(self) -> None:
        """Nothing to release: one request per read."""


def from_spec(spec: Mapping[str, Any], context: object = None) -> PrometheusLagSource:
    del context
    url = spec.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise LagSourceConfigError(f"lagSource.prometheus.url: expected an http(s) URL, got {url!r}")
    exporter_name = spec.get("exporter", "kafka_exporter")
    if exporter_name not in EXPORTERS:
        raise LagSourceConfigError(
            f"lagSource.prometheus.exporter: unknown exporter {exporter_name!r}: "
            f"choose one of {', '.join(EXPORTERS)}"
        )
    exporter = EXPORTERS[exporter_name]
    query = spec.get("query")
    if query is not None:
        if not isinstance(query, str) or not query.strip():
            raise LagSourceConfigError("lagSource.prometheus.query: expected a PromQL expression")
        exporter = ExporterQuery(
            query,
            spec.get("topicLabel", exporter.topic_label),
            spec.get("partitionLabel", exporter.partition_label),
        )
    timeout = float(spec.get("timeoutSeconds", DEFAULT_TIMEOUT_S))
    if timeout <= 0:
        raise LagSourceConfigError("lagSource.prometheus.timeoutSeconds: must be positive")
    return PrometheusLagSource(url=url, exporter=exporter, timeout=timeout)
