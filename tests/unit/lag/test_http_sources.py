"""static, prometheus and burrow sources: answers parsed, partitions counted by Kafka's metadata,
errors mapped to the LagError tree.

Prometheus and Burrow are stood in for by a local HTTP server answering their documented JSON
(unit level: the parsing and the error mapping, not the products); the partition counts by a
provider in the `SourceContext`, as the operator's per-cluster readers give them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlparse

import pytest

from groupops.lag import (
    LagAuthorizationError,
    LagSnapshot,
    LagSourceConfigError,
    LagSourceUnavailable,
    UnknownTopicError,
)
from groupops.lag.prometheus import EXPORTERS
from groupops.lag.registry import SourceContext, build_lag_source
from tests.fixtures.json_http import JsonHandler, serving


class Counts:
    """A `PartitionCounts` answering from a table, remembering what it was asked."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = dict(counts)
        self.asked: list[list[str]] = []

    def __call__(self, topics: Sequence[str]) -> Mapping[str, int]:
        self.asked.append(list(topics))
        found = {topic: self.counts[topic] for topic in topics if topic in self.counts}
        if not found:
            raise UnknownTopicError(f"none of {', '.join(topics)} exists", tuple(topics))
        return found


COUNTS = {"orders": 4, "audit": 2, "t": 1, "orders.v1": 2, "orders-x": 1}
CONTEXT = SourceContext(bootstrap_servers="unused:9092", partition_counts=Counts(COUNTS))


class Canned(JsonHandler):
    answers: ClassVar[dict[str, tuple[int, Any]]] = {}
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        parsed = urlparse(self.path)
        Canned.seen.append(self.path)
        self.send_json(*Canned.answers.get(parsed.path, (404, {"error": True, "message": "not found"})))


@pytest.fixture
def server() -> Iterator[str]:
    Canned.answers, Canned.seen = {}, []
    with serving(Canned) as httpd:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"


def vector(
    *series: tuple[str, int, float | str], topic_label: str = "topic", partition_label: str = "partition"
) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {topic_label: t, partition_label: str(p)}, "value": [0, str(v)]}
                for t, p, v in series
            ],
        },
    }


def prometheus(server: str, group: str, topics: list[str], **settings: Any) -> LagSnapshot:
    return build_lag_source("prometheus", {"url": server, **settings}, CONTEXT).read(group, topics)


def sent_query() -> str:
    return parse_qs(urlparse(Canned.seen[-1]).query)["query"][0]


def test_static_source_returns_the_policy_numbers() -> None:
    source = build_lag_source("static", {"lags": {"a": [1, 2], "b": [3]}}, CONTEXT)
    snapshot = source.read("g", ["a", "b"])
    assert snapshot.lags == {"a": (1, 2), "b": (3,)}
    assert snapshot.total() == 6
    with pytest.raises(UnknownTopicError):
        source.read("g", ["c"])


# -- prometheus --------------------------------------------------------------------------------------


def test_prometheus_counts_partitions_by_kafka_and_reads_missing_ones_as_zero(server: str) -> None:
    """orders has 4 partitions; the exporter has series for 0 and 2 only (1 and 3 never committed)."""
    Canned.answers["/api/v1/query"] = (200, vector(("orders", 0, 5), ("orders", 2, 7.9)))
    snapshot = prometheus(server, "orders-g", ["orders"])
    assert snapshot.lags == {"orders": (5, 0, 7, 0)}
    assert snapshot.topics_without_series == () and snapshot.missing_topics == ()
    assert 'consumergroup="orders-g"' in sent_query() and 'topic=~"orders"' in sent_query()


def test_prometheus_ignores_a_series_beyond_the_topics_partition_count(server: str) -> None:
    Canned.answers["/api/v1/query"] = (200, vector(("audit", 0, 3), ("audit", 1, 4), ("audit", 7, 99)))
    assert prometheus(server, "g", ["audit"]).lags == {"audit": (3, 4)}


def test_a_topic_without_series_is_planned_by_its_partition_count_and_reported(server: str) -> None:
    """A new group: the exporter has never seen it commit. Not an error: every partition reads 0."""
    Canned.answers["/api/v1/query"] = (200, vector(("orders", 1, 8)))
    snapshot = prometheus(server, "g", ["orders", "audit"])
    assert snapshot.lags == {"orders": (0, 8, 0, 0), "audit": (0, 0)}
    assert snapshot.topics_without_series == ("audit",)


def test_a_group_without_any_series_is_planned_by_partition_counts(server: str) -> None:
    Canned.answers["/api/v1/query"] = (200, vector())
    snapshot = prometheus(server, "new-g", ["orders", "audit"])
    assert snapshot.lags == {"orders": (0, 0, 0, 0), "audit": (0, 0)}
    assert snapshot.topics_without_series == ("orders", "audit")


def test_a_topic_kafka_does_not_have_is_missing_and_none_existing_is_unknown(server: str) -> None:
    Canned.answers["/api/v1/query"] = (200, vector(("orders", 0, 1)))
    snapshot = prometheus(server, "g", ["orders", "gone"])
    assert snapshot.lags == {"orders": (1, 0, 0, 0)}
    assert snapshot.missing_topics == ("gone",)
    with pytest.raises(UnknownTopicError):
        prometheus(server, "g", ["gone"])


@pytest.mark.parametrize(
    ("value", "lag"),
    [
        pytest.param("NaN", 0, id="nan"),
        pytest.param("-3", 0, id="negative"),
        pytest.param("+Inf", 0, id="infinite"),
        pytest.param("12.9", 12, id="fraction-truncated"),
    ],
)
def test_a_sample_that_is_no_lag_reads_as_zero(server: str, value: str, lag: int) -> None:
    Canned.answers["/api/v1/query"] = (200, vector(("t", 0, value)))
    assert prometheus(server, "g", ["t"]).lags == {"t": (lag,)}


def test_duplicate_series_of_a_partition_count_their_highest_lag(server: str) -> None:
    """A custom query that does not aggregate (kafka-lag-exporter's member labels after a rebalance)."""
    Canned.answers["/api/v1/query"] = (200, vector(("audit", 0, 5), ("audit", 0, 9), ("audit", 0, 2)))
    snapshot = prometheus(server, "g", ["audit"], query='kafka_consumergroup_group_lag{group="{group}"}')
    assert snapshot.lags == {"audit": (9, 0)}


@pytest.mark.parametrize(
    ("exporter", "metric", "group_label"),
    [
        pytest.param("kafka_exporter", "kafka_consumergroup_lag", "consumergroup", id="kafka_exporter"),
        pytest.param("kminion", "kminion_kafka_consumer_group_topic_partition_lag", "group_id", id="kminion"),
        pytest.param("kafka-lag-exporter", "kafka_consumergroup_group_lag", "group", id="kafka-lag-exporter"),
    ],
)
def test_each_exporter_query_takes_the_max_by_topic_and_partition(
    server: str, exporter: str, metric: str, group_label: str
) -> None:
    labels = EXPORTERS[exporter]
    Canned.answers["/api/v1/query"] = (
        200,
        vector(("orders", 3, 40), topic_label=labels.topic_label, partition_label=labels.partition_label),
    )
    snapshot = prometheus(server, "g", ["orders"], exporter=exporter)
    assert snapshot.lags == {"orders": (0, 0, 0, 40)}
    query = sent_query()
    assert query.startswith(f"max by ({labels.topic_label}, {labels.partition_label}) ({metric}{{")
    assert f'{group_label}="g"' in query


def test_topics_are_a_regex_escaped_for_a_promql_string(server: str) -> None:
    """PromQL unquotes "orders\\\\.v1" to the regex orders\\.v1; a single backslash would be a
    parse error ("unknown escape sequence") on a real Prometheus."""
    Canned.answers["/api/v1/query"] = (200, vector(("orders.v1", 1, 3)))
    snapshot = prometheus(server, "g", ["orders.v1", "orders-x"])
    assert snapshot.lags == {"orders.v1": (0, 3), "orders-x": (0,)}
    assert 'topic=~"orders\\\\.v1|orders\\\\-x"' in sent_query()


def test_a_custom_query_keeps_its_own_braces(server: str) -> None:
    Canned.answers["/api/v1/query"] = (
        200,
        vector(("t", 0, 1), topic_label="topic_name", partition_label="partition_id"),
    )
    query = 'sum by (topic_name, partition_id) (my_lag{group="{group}", topic_name=~"{topics}", env="prod"})'
    snapshot = prometheus(
        server, "g", ["t"], query=query, topicLabel="topic_name", partitionLabel="partition_id"
    )
    assert snapshot.lags == {"t": (1,)}
    assert sent_query() == query.replace("{group}", "g").replace("{topics}", "t")


@pytest.mark.parametrize(
    ("status", "error"),
    [
        pytest.param(503, LagSourceUnavailable, id="server-error-is-transient"),
        pytest.param(403, LagAuthorizationError, id="forbidden"),
        pytest.param(400, LagSourceConfigError, id="bad-query"),
    ],
)
def test_prometheus_http_errors_map_to_the_tree(server: str, status: int, error: type[Exception]) -> None:
    Canned.answers["/api/v1/query"] = (status, {"status": "error", "error": "x"})
    with pytest.raises(error):
        prometheus(server, "g", ["orders"])


def test_unreachable_source_is_unavailable() -> None:
    source = build_lag_source("prometheus", {"url": "http://127.0.0.1:9", "timeoutSeconds": 2}, CONTEXT)
    with pytest.raises(LagSourceUnavailable, match=r"cannot reach http://127\.0\.0\.1:9"):
        source.read("g", ["orders"])


def test_partition_counts_that_fail_say_they_came_from_kafka(server: str) -> None:
    def down(topics: Sequence[str]) -> Mapping[str, int]:
        raise LagSourceUnavailable("no answer from Kafka at k:9092 within 6 s")

    Canned.answers["/api/v1/query"] = (200, vector(("orders", 0, 1)))
    source = build_lag_source("prometheus", {"url": server}, replace(CONTEXT, partition_counts=down))
    with pytest.raises(LagSourceUnavailable, match=r"^partition counts from Kafka: no answer"):
        source.read("g", ["orders"])


# -- burrow -----------------------------------------------------------------------------------------

LAG_PATH = "/v3/kafka/main/consumer/orders-g/lag"


def burrow(server: str, topics: list[str], group: str = "orders-g", **settings: Any) -> LagSnapshot:
    spec = {"url": server, "cluster": "main", **settings}
    return build_lag_source("burrow", spec, CONTEXT).read(group, topics)


def burrow_status(**status: Any) -> dict[str, Any]:
    return {"error": False, "message": "consumer status returned", "status": {"status": "OK", **status}}


def test_burrow_current_lag_counted_by_kafka(server: str) -> None:
    Canned.answers[LAG_PATH] = (
        200,
        burrow_status(
            partitions=[
                {"topic": "orders", "partition": 1, "current_lag": 40, "status": "OK"},
                {"topic": "orders", "partition": 0, "current_lag": 2, "status": "OK"},
                None,
            ],
            maxlag={"topic": "orders", "partition": 1, "current_lag": 40},
        ),
    )
    snapshot = burrow(server, ["orders"])
    assert snapshot.lags == {"orders": (2, 40, 0, 0)}
    assert snapshot.topics_without_series == ()


def test_burrow_maxlag_alone_is_read_when_partitions_are_left_out(server: str) -> None:
    """The `/status` shape: only partitions in trouble, here none listed, and the worst one."""
    Canned.answers[LAG_PATH] = (
        200,
        burrow_status(partitions=[], maxlag={"topic": "orders", "partition": 3, "current_lag": 17}),
    )
    assert burrow(server, ["orders"]).lags == {"orders": (0, 0, 0, 17)}


def test_burrow_before_1_1_gives_the_lag_at_the_last_offset(server: str) -> None:
    Canned.answers[LAG_PATH] = (
        200,
        burrow_status(partitions=[{"topic": "audit", "partition": 1, "end": {"offset": 90, "lag": 6}}]),
    )
    assert burrow(server, ["audit"]).lags == {"audit": (0, 6)}


@pytest.mark.parametrize(
    "not_found",
    [
        pytest.param(
            burrow_status(status="NOTFOUND", partitions=[], maxlag=None, totallag=0), id="burrow-1.x"
        ),
        pytest.param({"error": True, "message": "cluster or consumer not found"}, id="older-error-shape"),
    ],
)
def test_a_group_burrow_does_not_know_yet_is_planned_by_partition_counts(
    server: str, not_found: dict[str, Any]
) -> None:
    Canned.answers["/v3/kafka/main/consumer/new-g/lag"] = (404, not_found)
    Canned.answers["/v3/kafka/main"] = (200, {"error": False, "message": "cluster module detail returned"})
    snapshot = burrow(server, ["orders", "audit"], group="new-g")
    assert snapshot.lags == {"orders": (0, 0, 0, 0), "audit": (0, 0)}
    assert snapshot.topics_without_series == ("orders", "audit")


def test_a_cluster_burrow_does_not_know_is_a_config_error_naming_the_field(server: str) -> None:
    Canned.answers[LAG_PATH] = (404, {"error": True, "message": "cluster or consumer not found"})
    with pytest.raises(LagSourceConfigError, match=r"^lagSource\.burrow\.cluster: .* no cluster 'main'"):
        burrow(server, ["orders"])


# -- settings -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "spec", "field"),
    [
        pytest.param("prometheus", {"url": "ftp://x"}, "lagSource.prometheus.url", id="prometheus-url"),
        pytest.param("prometheus", {"url": "http://p:port"}, "lagSource.prometheus.url", id="url-port"),
        pytest.param(
            "prometheus",
            {"url": "http://x", "exporter": "nope"},
            "lagSource.prometheus.exporter",
            id="exporter",
        ),
        pytest.param(
            "prometheus",
            {"url": "http://x", "topicLabel": "t"},
            "lagSource.prometheus.topicLabel",
            id="label-without-query",
        ),
        pytest.param(
            "prometheus",
            {"url": "http://x", "timeout": 3},
            "lagSource.prometheus.timeout",
            id="unknown-field",
        ),
        pytest.param(
            "prometheus",
            {"url": "http://x", "timeoutSeconds": 0},
            "lagSource.prometheus.timeoutSeconds",
            id="timeout-zero",
        ),
        pytest.param(
            "prometheus",
            {"url": "http://x", "timeoutSeconds": True},
            "lagSource.prometheus.timeoutSeconds",
            id="timeout-bool",
        ),
        pytest.param("burrow", {"url": "http://x"}, "lagSource.burrow.cluster", id="burrow-cluster"),
        pytest.param(
            "burrow",
            {"url": "http://x", "cluster": "c", "timeoutSeconds": 500},
            "lagSource.burrow.timeoutSeconds",
            id="burrow-timeout",
        ),
        pytest.param("static", {"lags": {"a": [-1]}}, "lagSource.static.lags.a[0]", id="static-negative"),
        pytest.param("nope", {}, "lagSource.type", id="unknown-type"),
    ],
)
def test_bad_source_settings_are_config_errors_naming_the_field(
    kind: str, spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(LagSourceConfigError) as caught:
        build_lag_source(kind, spec, CONTEXT)
    assert str(caught.value).startswith(f"{field}: ")


def test_credentials_in_the_url_are_refused_without_repeating_them() -> None:
    with pytest.raises(LagSourceConfigError) as caught:
        build_lag_source("burrow", {"url": "https://me:hunter2@burrow:8000", "cluster": "c"}, CONTEXT)
    assert str(caught.value).startswith("lagSource.burrow.url: ")
    assert "hunter2" not in str(caught.value)


SECRET_ANSWER = "internal-admin-token-3141"


@pytest.mark.parametrize(
    ("kind", "path", "status", "body"),
    [
        pytest.param("prometheus", "/api/v1/query", 400, {"error": SECRET_ANSWER}, id="prometheus-4xx"),
        pytest.param("prometheus", "/api/v1/query", 503, {"error": SECRET_ANSWER}, id="prometheus-5xx"),
        pytest.param("prometheus", "/api/v1/query", 401, {"error": SECRET_ANSWER}, id="prometheus-401"),
        pytest.param(
            "prometheus",
            "/api/v1/query",
            200,
            {"status": "error", "errorType": "bad_data", "error": SECRET_ANSWER},
            id="prometheus-error-answer",
        ),
        pytest.param(
            "prometheus",
            "/api/v1/query",
            200,
            {
                "status": "success",
                "data": {"resultType": "vector", "result": [{"metric": {"x": SECRET_ANSWER}}]},
            },
            id="prometheus-odd-series",
        ),
        pytest.param(
            "prometheus",
            "/api/v1/query",
            200,
            {
                "status": "success",
                "data": {
                    "resultType": "vector",
                    "result": [{"metric": {"topic": "t", "partition": "0"}, "value": SECRET_ANSWER}],
                },
            },
            id="prometheus-odd-sample",
        ),
        pytest.param(
            "burrow",
            "/v3/kafka/c/consumer/g/lag",
            200,
            {"error": True, "message": SECRET_ANSWER},
            id="burrow-error",
        ),
        pytest.param(
            "burrow",
            "/v3/kafka/c/consumer/g/lag",
            200,
            {"error": False, "status": {"partitions": [{"topic": SECRET_ANSWER}]}},
            id="burrow-odd-entry",
        ),
        pytest.param(
            "burrow", "/v3/kafka/c/consumer/g/lag", 500, {"message": SECRET_ANSWER}, id="burrow-5xx"
        ),
        pytest.param(
            "burrow", "/v3/kafka/c/consumer/g/lag", 404, {"message": SECRET_ANSWER}, id="burrow-404"
        ),
    ],
)
def test_what_a_server_answers_never_reaches_the_error_message(
    server: str, kind: str, path: str, status: int, body: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Error messages reach the policy's status: a policy author pointing the source at an
    internal service must not read its answers back. The operator's log keeps them."""
    Canned.answers[path] = (status, body)
    settings = {"url": server, **({"cluster": "c"} if kind == "burrow" else {})}
    with pytest.raises((LagSourceConfigError, LagSourceUnavailable, LagAuthorizationError)) as caught:
        build_lag_source(kind, settings, CONTEXT).read("g", ["t"])
    assert SECRET_ANSWER not in str(caught.value)
    assert SECRET_ANSWER in caplog.text
