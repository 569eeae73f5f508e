"""The consumer's Prometheus metrics: each runtime event moves the series its table documents,
per-partition series leave with their partition, the exposition is served over HTTP only when a
port is set, and GROUPOPS_METRICS_PORT / _HOST are parsed or refused naming the variable."""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from groupops.cli import app
from groupops.consumer import ConsumerConfigError, PlanRuntime, RuntimeSettings, load_processor
from groupops.consumer.metrics import ConsumerMetrics
from groupops.consumer.settings import MetricsSettings
from groupops.model import TopicPartition
from tests.unit.consumer.pod_env import REQUIRED_POD_ENV

ORDERS_0 = TopicPartition("orders", 0)
ORDERS_1 = TopicPartition("orders", 1)

POD_ENV = REQUIRED_POD_ENV


@pytest.fixture
def metrics() -> Iterator[ConsumerMetrics]:
    metrics = ConsumerMetrics()
    yield metrics
    metrics.close()


def value(metrics: ConsumerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_a_replica_that_applied_nothing_yet_reports_no_epoch_nothing_owned_and_no_lease(
    metrics: ConsumerMetrics,
) -> None:
    assert value(metrics, "groupops_consumer_epoch_applied") == -1
    assert value(metrics, "groupops_consumer_partitions_owned") == 0
    assert value(metrics, "groupops_consumer_lease_valid") == 0


def test_applying_a_plan_reports_its_epoch_the_partitions_owned_and_a_valid_lease(
    metrics: ConsumerMetrics,
) -> None:
    metrics.plan_applied(7, owned=3)
    assert value(metrics, "groupops_consumer_epoch_applied") == 7
    assert value(metrics, "groupops_consumer_partitions_owned") == 3
    assert value(metrics, "groupops_consumer_lease_valid") == 1


def test_a_self_fence_drops_ownership_and_lease_counts_once_and_keeps_the_epoch(
    metrics: ConsumerMetrics,
) -> None:
    metrics.plan_applied(7, owned=3)
    metrics.record_lag({ORDERS_0: 5})
    metrics.fenced(was_consuming=True)
    metrics.fenced(was_consuming=False)  # already stopped: not a second fence
    assert value(metrics, "groupops_consumer_self_fences_total") == 1
    assert value(metrics, "groupops_consumer_partitions_owned") == 0
    assert value(metrics, "groupops_consumer_lease_valid") == 0
    assert value(metrics, "groupops_consumer_epoch_applied") == 7
    assert value(metrics, "groupops_consumer_lag", topic="orders", partition="0") is None


def test_messages_are_counted_per_partition(metrics: ConsumerMetrics) -> None:
    for tp in (ORDERS_0, ORDERS_0, ORDERS_1):
        metrics.processed(tp)
    assert value(metrics, "groupops_consumer_messages_processed_total", topic="orders", partition="0") == 2
    assert value(metrics, "groupops_consumer_messages_processed_total", topic="orders", partition="1") == 1


def test_commits_and_commit_failures_are_counted_apart(metrics: ConsumerMetrics) -> None:
    metrics.commit_succeeded()
    metrics.commit_succeeded()
    metrics.commit_failed()
    assert value(metrics, "groupops_consumer_commits_total") == 2
    assert value(metrics, "groupops_consumer_commit_failures_total") == 1


def test_each_revoke_is_one_observation_of_its_duration(metrics: ConsumerMetrics) -> None:
    metrics.revoked(0.2)
    metrics.revoked(3.0)
    assert value(metrics, "groupops_consumer_revoke_seconds_count") == 2
    assert value(metrics, "groupops_consumer_revoke_seconds_sum") == pytest.approx(3.2)
    assert value(metrics, "groupops_consumer_revoke_seconds_bucket", le="0.25") == 1


def test_lag_is_reported_per_owned_partition_and_leaves_with_the_partition(metrics: ConsumerMetrics) -> None:
    metrics.record_lag({ORDERS_0: 12, ORDERS_1: 0})
    assert value(metrics, "groupops_consumer_lag", topic="orders", partition="0") == 12
    metrics.released([ORDERS_0])
    assert value(metrics, "groupops_consumer_lag", topic="orders", partition="0") is None
    assert value(metrics, "groupops_consumer_lag", topic="orders", partition="1") == 0
    metrics.stopped()
    assert value(metrics, "groupops_consumer_lag", topic="orders", partition="1") is None


def test_the_exposition_is_served_over_http_with_every_metric(metrics: ConsumerMetrics) -> None:
    port = free_port()
    metrics.plan_applied(4, owned=2)
    metrics.processed(ORDERS_0)
    metrics.serve("127.0.0.1", port)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for name in (
        "groupops_consumer_epoch_applied 4.0",
        "groupops_consumer_partitions_owned 2.0",
        "groupops_consumer_lease_valid 1.0",
        'groupops_consumer_messages_processed_total{partition="0",topic="orders"} 1.0',
        "groupops_consumer_commits_total",
        "groupops_consumer_commit_failures_total",
        "groupops_consumer_self_fences_total",
        "groupops_consumer_revoke_seconds_bucket",
        "# TYPE groupops_consumer_lag gauge",
    ):
        assert name in text
    metrics.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


@pytest.mark.parametrize("port", [pytest.param(0, id="port 0"), pytest.param(None, id="no port")])
def test_without_a_port_nothing_is_served(metrics: ConsumerMetrics, port: int | None) -> None:
    threads_before = threading.active_count()
    metrics.serve("127.0.0.1", port)
    assert threading.active_count() == threads_before


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({}, MetricsSettings(port=None, host="127.0.0.1"), id="not set: not served"),
        pytest.param({"GROUPOPS_METRICS_PORT": ""}, MetricsSettings(port=None), id="empty: not served"),
        pytest.param({"GROUPOPS_METRICS_PORT": "0"}, MetricsSettings(port=None), id="0: not served"),
        pytest.param(
            {"GROUPOPS_METRICS_PORT": "9404"}, MetricsSettings(port=9404, host="127.0.0.1"), id="loopback"
        ),
        pytest.param(
            {"GROUPOPS_METRICS_PORT": "9404", "GROUPOPS_METRICS_HOST": "0.0.0.0"},
            MetricsSettings(port=9404, host="0.0.0.0"),
            id="every interface when asked",
        ),
    ],
)
def test_the_metrics_port_and_host_come_from_the_environment(
    env: dict[str, str], expected: MetricsSettings
) -> None:
    assert RuntimeSettings.from_env({**POD_ENV, **env}).metrics == expected


@pytest.mark.parametrize(
    ("env", "field"),
    [
        pytest.param({"GROUPOPS_METRICS_PORT": "http"}, "GROUPOPS_METRICS_PORT", id="not a number"),
        pytest.param({"GROUPOPS_METRICS_PORT": "-1"}, "GROUPOPS_METRICS_PORT", id="negative"),
        pytest.param({"GROUPOPS_METRICS_PORT": "65536"}, "GROUPOPS_METRICS_PORT", id="above 65535"),
        pytest.param({"GROUPOPS_METRICS_HOST": "everywhere"}, "GROUPOPS_METRICS_HOST", id="host not an IP"),
    ],
)
def test_a_bad_metrics_setting_is_refused_naming_the_variable(env: dict[str, str], field: str) -> None:
    with pytest.raises(ConsumerConfigError) as caught:
        RuntimeSettings.from_env({**POD_ENV, **env})
    assert caught.value.field == field
    assert field in str(caught.value)


def test_the_command_names_the_flag_of_a_bad_metrics_port(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, setting in POD_ENV.items():
        monkeypatch.setenv(key, setting)
    result = CliRunner().invoke(app, ["consume", "--metrics-port", "70000"])
    assert result.exit_code == 2
    assert result.stderr.strip().endswith("(--metrics-port or GROUPOPS_METRICS_PORT)")


def test_a_metrics_port_already_taken_stops_the_runtime_before_it_connects_anywhere() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = RuntimeSettings.from_env({**POD_ENV, "GROUPOPS_METRICS_PORT": str(port)})
        runtime = PlanRuntime(settings, load_processor(None))
        with pytest.raises(ConsumerConfigError) as caught:
            runtime.run()
    assert caught.value.field == "GROUPOPS_METRICS_PORT"
    assert f"cannot serve metrics on 127.0.0.1:{port}" in caught.value.message
