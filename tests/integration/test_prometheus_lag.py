"""The `prometheus` lag source on a real Prometheus (Debian's 2.42) scraping each exporter's metric
set computed from a real broker's offsets (tests/monitoring/exporters.py: the exporters cannot be
installed here, their documented names and labels are served instead):

- for kafka_exporter, KMinion and kafka-lag-exporter (whose duplicate member series must be
  aggregated), the source reads exactly the lags the `kafka` source reads from the broker, and the
  `lag` strategy gives the same assignment from both;
- a partition the group never committed has no series: it reads 0 and is still counted, since
  the counts come from Kafka's metadata;
- after a kafka-lag-exporter rebalance, the old members' series (here with a higher, outdated
  lag) stop counting at once: Prometheus marks them stale when they vanish from a scrape;
- a group without any series yet reads every partition as 0 and names its topics as without
  series, then reads real lag once the exporter reports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import pytest

from groupops.assign import get_strategy
from groupops.devstack.prometheus import PrometheusServer
from groupops.lag import LagSource
from groupops.lag.registry import SourceContext, build_lag_source
from groupops.model import GroupInput, Member, MemberId, TopicPartition
from tests.e2e.waiting import wait_for
from tests.fixtures.stack import make_unique_name
from tests.integration.test_kafka_lag import consume_and_commit, create_topic, produce, source
from tests.monitoring.exporters import ExporterServer

pytestmark = [pytest.mark.integration, pytest.mark.no_time_bound]

COUNTS = [9_000, 3_000, 6_000, 4_000, 2_000]
COMMITTED = {0: 1_000, 1: 1_000, 2: 500, 3: 4_000}
"""Partition 4 never committed: no exporter series for it."""
EXPORTED_LAGS = [8_000, 2_000, 5_500, 0, 0]
"""COUNTS minus COMMITTED where committed; 0 for partition 4, which has no series."""


@pytest.fixture(scope="module")
def exporter_on_prometheus(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ExporterServer, PrometheusServer]]:
    """One exporter and one Prometheus for the module; each test serves groups of its own."""
    with (
        ExporterServer(kafka_bootstrap) as exporter,
        PrometheusServer(
            tmp_path_factory.mktemp("prometheus"), {"exporters": [exporter.address]}
        ) as prometheus,
    ):
        prometheus.wait_for_targets_up(60)
        yield exporter, prometheus


@pytest.fixture(scope="module")
def committed_group(kafka_bootstrap: str) -> tuple[str, str]:
    """A topic with COUNTS messages and a group committed at COMMITTED, shared by the tests that
    only read it."""
    topic, group = make_unique_name("orders"), make_unique_name("processor")
    create_topic(kafka_bootstrap, topic, len(COUNTS))
    produce(kafka_bootstrap, topic, COUNTS)
    consume_and_commit(kafka_bootstrap, group, topic, COMMITTED)
    return topic, group


def prometheus_source(prometheus: PrometheusServer, kafka_bootstrap: str, exporter: str) -> LagSource:
    context = SourceContext(bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest")
    return build_lag_source("prometheus", {"url": prometheus.url, "exporter": exporter}, context)


def lag_plan(topic: str, lags: Mapping[str, Sequence[int]]) -> dict[MemberId, list[TopicPartition]]:
    members = tuple(Member(member_id=MemberId(f"g-{i}"), topics=frozenset({topic})) for i in range(3))
    group = GroupInput(
        topics={topic: len(COUNTS)}, members=members, lags={t: list(v) for t, v in lags.items()}
    )
    return {member: list(tps) for member, tps in get_strategy("lag")(group).items()}


@pytest.mark.parametrize("exporter_name", ["kafka_exporter", "kminion", "kafka-lag-exporter"])
def test_each_exporters_series_read_as_the_broker_reads_the_offsets(
    kafka_bootstrap: str,
    committed_group: tuple[str, str],
    exporter_on_prometheus: tuple[ExporterServer, PrometheusServer],
    exporter_name: str,
) -> None:
    exporter, prometheus = exporter_on_prometheus
    topic, group = committed_group
    with source(kafka_bootstrap) as kafka_source:
        from_broker = kafka_source.read(group, [topic])
    assert list(from_broker.lags[topic]) == [8_000, 2_000, 5_500, 0, 2_000]

    exporter.serve(group, [topic])
    lag_source = prometheus_source(prometheus, kafka_bootstrap, exporter_name)
    try:
        # Partition 4 has no series (never committed): the exporter view reads it as 0.
        expected = EXPORTED_LAGS
        snapshot = wait_for(
            "the exporter's series in Prometheus",
            lambda: (s := lag_source.read(group, [topic])) and list(s.lags.get(topic, ())) == expected and s,
            30,
            interval=1,
        )
    finally:
        lag_source.close()
    assert snapshot.topics_without_series == ()
    assert lag_plan(topic, snapshot.lags) == lag_plan(topic, {topic: expected})
    # Where the broker and the exporters agree (every committed partition), so do the plans.
    committed_only = {topic: [lag if p in COMMITTED else 0 for p, lag in enumerate(from_broker.lags[topic])]}
    assert lag_plan(topic, snapshot.lags) == lag_plan(topic, committed_only)


def test_a_group_without_series_reads_zero_on_kafkas_counts_until_the_exporter_reports_it(
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    exporter_on_prometheus: tuple[ExporterServer, PrometheusServer],
) -> None:
    exporter, prometheus = exporter_on_prometheus
    topic, group = unique_name("orders"), unique_name("processor")
    create_topic(kafka_bootstrap, topic, len(COUNTS))
    produce(kafka_bootstrap, topic, COUNTS)
    lag_source = prometheus_source(prometheus, kafka_bootstrap, "kafka_exporter")
    try:
        fresh = lag_source.read(group, [topic])
        assert list(fresh.lags[topic]) == [0] * len(COUNTS)
        assert fresh.topics_without_series == (topic,)

        consume_and_commit(kafka_bootstrap, group, topic, COMMITTED)
        exporter.serve(group, [topic])
        seen = wait_for(
            "the group's series in Prometheus",
            lambda: (s := lag_source.read(group, [topic])) and not s.topics_without_series and s,
            30,
            interval=1,
        )
    finally:
        lag_source.close()
    assert list(seen.lags[topic]) == EXPORTED_LAGS


def test_series_of_members_gone_in_a_rebalance_stop_counting_once_they_vanish(
    kafka_bootstrap: str,
    committed_group: tuple[str, str],
    exporter_on_prometheus: tuple[ExporterServer, PrometheusServer],
) -> None:
    exporter, prometheus = exporter_on_prometheus
    topic, group = committed_group
    exact = EXPORTED_LAGS
    outdated = [lag + 1_000 if p in COMMITTED else 0 for p, lag in enumerate(exact)]
    exporter.serve(group, [topic])
    exporter.lag_exporter_members("consumer-old", offset=1_000)
    lag_source = prometheus_source(prometheus, kafka_bootstrap, "kafka-lag-exporter")
    try:
        wait_for(
            "the old member's series",
            lambda: list(lag_source.read(group, [topic]).lags.get(topic, ())) == outdated,
            30,
            interval=1,
        )
        exporter.lag_exporter_members("consumer-new")
        wait_for(
            "only the new member's series counting",
            lambda: list(lag_source.read(group, [topic]).lags.get(topic, ())) == exact,
            30,
            interval=1,
        )
    finally:
        lag_source.close()
        exporter.lag_exporter_members("consumer-1", "consumer-2")  # the module's exporter, as it was
