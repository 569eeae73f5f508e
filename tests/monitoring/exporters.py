"""The lag metrics of the exporters people run, served from a real broker's offsets, for tests
that point the `prometheus` lag source at a real Prometheus.

kafka_exporter, KMinion and kafka-lag-exporter themselves cannot be installed here, so this
collector serves their metric sets with their documented names and labels, computed at every
scrape the way they compute them (log end offset minus the group's committed offset, per
partition the group has committed; partitions without a commit have no series, as with the
exporters):

- kafka_exporter: `kafka_consumergroup_lag{consumergroup, topic, partition}`;
- KMinion: `kminion_kafka_consumer_group_topic_partition_lag{group_id, topic_name, partition_id}`;
- kafka-lag-exporter: `kafka_consumergroup_group_lag{cluster_name, group, topic, partition,
  member_host, consumer_id, client_id}`, twice per partition with different member labels (the
  series a member left behind after a rebalance, before it goes stale), so queries must aggregate.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from groupops.devstack.process import free_port
from groupops.lag.kafka import KafkaLagSettings, KafkaLagSource

__all__ = ["ExporterServer"]


class _ExporterMetrics(Collector):
    def __init__(self, bootstrap: str) -> None:
        self._source = KafkaLagSource(
            KafkaLagSettings(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
        )
        self._lock = threading.Lock()
        self.groups: dict[str, tuple[str, ...]] = {}
        """The groups served, with their topics (a group not listed has no series at all)."""
        self.lag_exporter_members: tuple[str, ...] = ("consumer-1", "consumer-2")
        """kafka-lag-exporter's member labels per partition: two by default (duplicates)."""
        self.lag_exporter_offset = 0
        """Added to kafka-lag-exporter's values: an old member's series reporting a stale lag."""

    def _lags(self) -> Iterator[tuple[str, str, int, int]]:
        for group, topics in sorted(self.groups.items()):
            with self._lock:
                snapshot = self._source.read(group, list(topics))
            for tp, offsets in sorted((snapshot.offsets or {}).items()):
                if offsets.committed is not None:
                    yield group, tp.topic, tp.partition, max(0, offsets.log_end - offsets.committed)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        kafka_exporter = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "Current Approximate Lag of a ConsumerGroup at Topic/Partition",
            labels=["consumergroup", "topic", "partition"],
        )
        kminion = GaugeMetricFamily(
            "kminion_kafka_consumer_group_topic_partition_lag",
            "Number of messages the consumer group is behind for a given partition.",
            labels=["group_id", "topic_name", "partition_id"],
        )
        lag_exporter = GaugeMetricFamily(
            "kafka_consumergroup_group_lag",
            "Group offset lag of a partition",
            labels=["cluster_name", "group", "topic", "partition", "member_host", "consumer_id", "client_id"],
        )
        for group, topic, partition, lag in self._lags():
            kafka_exporter.add_metric([group, topic, str(partition)], lag)
            kminion.add_metric([group, topic, str(partition)], lag)
            for member in self.lag_exporter_members:
                lag_exporter.add_metric(
                    ["local", group, topic, str(partition), "/127.0.0.1", f"{member}-0a1b", member],
                    lag + self.lag_exporter_offset,
                )
        yield kafka_exporter
        yield kminion
        yield lag_exporter

    def close(self) -> None:
        self._source.close()


class ExporterServer:
    """The collector on /metrics of a free 127.0.0.1 port; `serve(group, topics)` adds a group."""

    def __init__(self, bootstrap: str) -> None:
        self._metrics = _ExporterMetrics(bootstrap)
        self._registry = CollectorRegistry()
        self._registry.register(self._metrics)
        self.port = free_port()
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def serve(self, group: str, topics: Sequence[str]) -> None:
        self._metrics.groups[group] = tuple(topics)

    def lag_exporter_members(self, *members: str, offset: int = 0) -> None:
        """From the next scrape on, kafka-lag-exporter's series carry these member labels (a
        rebalance: the previous members' series disappear) and report lag + `offset`."""
        self._metrics.lag_exporter_members = members
        self._metrics.lag_exporter_offset = offset

    def __enter__(self) -> ExporterServer:
        self._server, self._thread = start_http_server(self.port, addr="127.0.0.1", registry=self._registry)
        return self

    def __exit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self._metrics.close()
