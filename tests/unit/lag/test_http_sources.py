"""static, prometheus and burrow sources: answers parsed, errors mapped to the LagError tree.

Prometheus and Burrow are stood in for by a local HTTP server answering their documented JSON
(unit level: the parsing and the error mapping, not the products)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlparse

import pytest

from groupops.lag import LagAuthorizationError, LagSourceConfigError, LagSourceUnavailable, UnknownTopicError
from groupops.lag.registry import SourceContext, build_lag_source

CONTEXT = SourceContext(bootstrap_servers="unused:9092")


class Canned(BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, tuple[int, Any]]] = {}
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        parsed = urlparse(self.path)
        Canned.seen.append(self.path)
        status, body = Canned.answers.get(parsed.path, (404, {"error": True, "message": "not found"}))
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        del args


@pytest.fixture
def server() -> Iterator[str]:
    httpd = HTTPServer(("127.0.0.1", 0), Canned)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    Canned.answers, Canned.seen = {}, []
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def vector(*series: tuple[str, int, float]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"topic": t, "partition": str(p)}, "value": [0, str(v)]} for t, p, v in series
            ],
        },
    }


def test_static_source_returns_the_policy_numbers() -> None:
    source = build_lag_source("static", {"lags": {"a": [1, 2], "b": [3]}}, CONTEXT)
    snapshot = source.read("g", ["a", "b"])
    assert snapshot.lags == {"a": (1, 2), "b": (3,)}
    assert snapshot.total() == 6
    with pytest.raises(UnknownTopicError):
        source.read("g", ["c"])


def test_prometheus_lag_per_partition(server: str) -> None:
    Canned.answers["/api/v1/query"] = (200, vector(("orders", 0, 5), ("orders", 2, 7.9)))
    snapshot = build_lag_source("prometheus", {"url": server}, CONTEXT).read("orders-g", ["orders"])
    assert snapshot.lags == {"orders": (5, 0, 7)}
    query = parse_qs(urlparse(Canned.seen[0]).query)["query"][0]
    assert 'consumergroup="orders-g"' in query and 'topic=~"orders"' in query


def test_prometheus_without_series_is_an_unknown_topic(server: str) -> None:
    Canned.answers["/api/v1/query"] = (200, vector())
    with pytest.raises(UnknownTopicError):
        build_lag_source("prometheus", {"url": server}, CONTEXT).read("g", ["orders"])


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
        build_lag_source("prometheus", {"url": server}, CONTEXT).read("g", ["orders"])


def test_unreachable_source_is_unavailable() -> None:
    source = build_lag_source("prometheus", {"url": "http://127.0.0.1:9", "timeoutSeconds": 2}, CONTEXT)
    with pytest.raises(LagSourceUnavailable):
        source.read("g", ["orders"])


def test_burrow_current_lag(server: str) -> None:
    Canned.answers["/v3/kafka/main/consumer/orders-g/lag"] = (
        200,
        {
            "error": False,
            "status": {
                "partitions": [
                    {"topic": "orders", "partition": 1, "current_lag": 40},
                    {"topic": "orders", "partition": 0, "current_lag": 2},
                ]
            },
        },
    )
    snapshot = build_lag_source("burrow", {"url": server, "cluster": "main"}, CONTEXT).read(
        "orders-g", ["orders"]
    )
    assert snapshot.lags == {"orders": (2, 40)}


def test_burrow_unknown_group_is_transient(server: str) -> None:
    with pytest.raises(LagSourceUnavailable):
        build_lag_source("burrow", {"url": server, "cluster": "main"}, CONTEXT).read("nobody", ["orders"])


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        pytest.param("prometheus", {"url": "ftp://x"}, id="prometheus-url"),
        pytest.param("prometheus", {"url": "http://x", "exporter": "nope"}, id="prometheus-exporter"),
        pytest.param("burrow", {"url": "http://x"}, id="burrow-cluster"),
        pytest.param("static", {"lags": {"a": [-1]}}, id="static-negative"),
        pytest.param("nope", {}, id="unknown-type"),
    ],
)
def test_bad_source_settings_are_config_errors(kind: str, spec: dict[str, Any]) -> None:
    with pytest.raises(LagSourceConfigError):
        build_lag_source(kind, spec, CONTEXT)


SECRET_ANSWER = "internal-admin-token-3141"


@pytest.mark.parametrize(
    ("kind", "path", "status", "body"),
    [
        pytest.param("prometheus", "/api/v1/query", 400, {"error": SECRET_ANSWER}, id="prometheus-4xx"),
        pytest.param("prometheus", "/api/v1/query", 503, {"error": SECRET_ANSWER}, id="prometheus-5xx"),
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
    ],
)
def test_what_a_server_answers_never_reaches_the_error_message(
    server: str, kind: str, path: str, status: int, body: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Error messages reach the policy's status: a policy author pointing the source at an
    internal service must not read its answers back. The operator's log keeps them."""
    Canned.answers[path] = (status, body)
    settings = {"url": server, **({"cluster": "c"} if kind == "burrow" else {})}
    with pytest.raises((LagSourceConfigError, LagSourceUnavailable)) as caught:
        build_lag_source(kind, settings, CONTEXT).read("g", ["t"])
    assert SECRET_ANSWER not in str(caught.value)
    assert SECRET_ANSWER in caplog.text
