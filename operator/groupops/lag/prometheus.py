"""`prometheus` lag source: per-partition lag from an exporter's metrics through Prometheus' HTTP API.

Spec (`lagSource.prometheus`): `url` (Prometheus' base URL, without /api/v1), `exporter` (whose
metric names and labels: kafka_exporter, kminion or kafka-lag-exporter; default kafka_exporter),
optional `query` overriding the exporter's, with `topicLabel` / `partitionLabel` when its labels
differ; and the connection: `timeoutSeconds`, `auth`, `tls` (lag/endpoint.py).

One instant query per read (`GET /api/v1/query`). Every exporter's query takes the max by topic
and partition: one partition may have several series (kafka-lag-exporter labels each with the
consumer member, which changes on a rebalance while the old series lingers until it goes stale;
two exporters scraped for high availability), and its lag is the highest of them. A custom query
should aggregate the same way; duplicates that reach us anyway are reduced by max too. A NaN,
infinite or negative value reads as 0 (an exporter's gauge for a partition it cannot compute).

In a query, `{group}` is replaced by the group id and `{topics}` by a regex alternation of the
topics, both escaped for a PromQL double-quoted string (a topic `orders.v1` arrives as
`orders\\\\.v1`, which PromQL unquotes to the regex `orders\\.v1`); nothing else in the query
is touched, so its own label matchers need no escaping.

Partition counts come from Kafka's metadata, not from the series (lag/series.py): a partition
without a series reads 0, and a topic without any series (a group the exporter has not seen
commit yet) is planned with lag 0 and listed in `topics_without_series`.

Steps: parse -> validate -> resolve the Secrets (from_spec) -> query on every `read`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from groupops.lag.base import LagSnapshot, LagSourceConfigError
from groupops.lag.endpoint import Endpoint, endpoint_from_spec
from groupops.lag.httpget import log_answer
from groupops.lag.series import Series, partition_counts, snapshot_from_series

if TYPE_CHECKING:
    from groupops.lag.registry import SourceContext

__all__ = ["EXPORTERS", "ExporterQuery", "PrometheusLagSource", "from_spec", "promql_string"]

TYPE = "prometheus"
WHERE = "lagSource.prometheus"
_OWN_FIELDS = ("exporter", "query", "topicLabel", "partitionLabel")


@dataclass(frozen=True, slots=True)
class ExporterQuery:
    """An exporter's lag metric: the PromQL template and the label names of topic and partition."""

    query: str
    topic_label: str
    partition_label: str


EXPORTERS: dict[str, ExporterQuery] = {
    "kafka_exporter": ExporterQuery(
        'max by (topic, partition) (kafka_consumergroup_lag{consumergroup="{group}", topic=~"{topics}"})',
        "topic",
        "partition",
    ),
    "kminion": ExporterQuery(
        "max by (topic_name, partition_id) ("
        'kminion_kafka_consumer_group_topic_partition_lag{group_id="{group}", topic_name=~"{topics}"})',
        "topic_name",
        "partition_id",
    ),
    "kafka-lag-exporter": ExporterQuery(
        'max by (topic, partition) (kafka_consumergroup_group_lag{group="{group}", topic=~"{topics}"})',
        "topic",
        "partition",
    ),
}


def promql_string(text: str) -> str:
    """`text` as the inside of a double-quoted PromQL string (backslashes and quotes escaped)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


class PrometheusLagSource:
    def __init__(self, *, endpoint: Endpoint, exporter: ExporterQuery, context: SourceContext) -> None:
        self._endpoint = endpoint
        self._exporter = exporter
        self._context = context

    def query_for(self, group_id: str, topics: Sequence[str]) -> str:
        alternation = "|".join(re.escape(topic) for topic in topics)
        return self._exporter.query.replace("{topics}", promql_string(alternation)).replace(
            "{group}", promql_string(group_id)
        )

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot:
        document = self._endpoint.get_json("/api/v1/query", {"query": self.query_for(group_id, topics)})
        if not isinstance(document, Mapping) or document.get("status") != "success":
            log_answer(self._endpoint.url, "Prometheus query failed", document)
            kind = document.get("errorType") if isinstance(document, Mapping) else None
            named = f" ({kind})" if isinstance(kind, str) and kind.isidentifier() and len(kind) <= 32 else ""
            raise LagSourceConfigError(
                f"Prometheus query failed{named}: check {WHERE}.query (the operator's log has "
                "Prometheus' answer)"
            )
        series = self._parse(document.get("data"))
        return snapshot_from_series(group_id, topics, series, partition_counts(self._context, topics))

    def _parse(self, data: Any) -> Series:
        if not isinstance(data, Mapping) or data.get("resultType") != "vector":
            raise LagSourceConfigError(f"Prometheus query must return an instant vector ({WHERE}.query)")
        found: dict[str, dict[int, int]] = {}
        topic_label, partition_label = self._exporter.topic_label, self._exporter.partition_label
        for series in data.get("result") or []:
            labels = series.get("metric") if isinstance(series, Mapping) else None
            labels = labels if isinstance(labels, Mapping) else {}
            topic, partition = labels.get(topic_label), labels.get(partition_label)
            if topic is None or partition is None or not str(partition).isdigit():
                log_answer(self._endpoint.url, "series without topic/partition labels", dict(labels))
                raise LagSourceConfigError(
                    f"series without {topic_label}/{partition_label} labels: set {WHERE}.topicLabel and "
                    "partitionLabel for this query (the operator's log has one)"
                )
            lag = _lag(series.get("value"))
            if lag is None:
                log_answer(self._endpoint.url, "sample not understood", series)
                raise LagSourceConfigError("Prometheus sample not understood (the operator's log has it)")
            per_topic = found.setdefault(str(topic), {})
            per_topic[int(partition)] = max(lag, per_topic.get(int(partition), 0))
        return found

    def close(self) -> None:
        """Nothing to release: one request per read."""


def _lag(value: Any) -> int | None:
    """A sample `[timestamp, "value"]` as a lag: NaN, infinities and negatives read 0; None when
    it is not a sample at all."""
    try:
        number = float(value[1])
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    return int(number) if math.isfinite(number) and number > 0 else 0


def from_spec(spec: Mapping[str, Any], context: SourceContext) -> PrometheusLagSource:
    """The registry's constructor: checks every field, reads the Secrets `auth` and `tls` name."""
    endpoint = endpoint_from_spec(spec, where=WHERE, own_fields=_OWN_FIELDS, secrets=context.secrets)
    exporter_name = spec.get("exporter", "kafka_exporter")
    if exporter_name not in EXPORTERS:
        raise LagSourceConfigError(
            f"{WHERE}.exporter: unknown exporter {exporter_name!r}: choose one of {', '.join(EXPORTERS)}"
        )
    exporter = EXPORTERS[exporter_name]
    query = spec.get("query")
    if query is None:
        for label in ("topicLabel", "partitionLabel"):
            if label in spec:
                raise LagSourceConfigError(f"{WHERE}.{label}: only used with {WHERE}.query")
        return PrometheusLagSource(endpoint=endpoint, exporter=exporter, context=context)
    if not isinstance(query, str) or not query.strip():
        raise LagSourceConfigError(f"{WHERE}.query: expected a PromQL expression")
    labels = []
    defaults = {"topicLabel": exporter.topic_label, "partitionLabel": exporter.partition_label}
    for label, default in defaults.items():
        value = spec.get(label, default)
        if not isinstance(value, str) or not value:
            raise LagSourceConfigError(f"{WHERE}.{label}: expected a label name, got {value!r}")
        labels.append(value)
    custom = ExporterQuery(query, labels[0], labels[1])
    return PrometheusLagSource(endpoint=endpoint, exporter=custom, context=context)
