"""`groupops consume` settings: the pod's environment becomes RuntimeSettings, and anything wrong
is refused naming the variable (or flag), with exit code 2 and one line on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from groupops.cli import app
from groupops.consumer import ConsumerConfigError, Delivery, RuntimeSettings, load_processor
from groupops.consumer.processors import noop, sleep_1ms
from tests.unit.consumer.pod_env import REQUIRED_POD_ENV

POD_ENV = {
    **REQUIRED_POD_ENV,
    "GROUPOPS_TOPICS": "orders, refunds",
    "GROUPOPS_STRATEGY": "lag",
    "GROUPOPS_DELIVERY": "plan",
    "GROUPOPS_AUTO_OFFSET_RESET": "latest",
    "GROUPOPS_KAFKA_PROPERTIES": '{"security.protocol":"SASL_SSL","fetch.min.bytes":1,"check.crcs":true}',
    "GROUPOPS_PLAN_CONFIGMAP": "orders-plan",
    "GROUPOPS_LEASE_NAME": "orders-orders-processor-0",
    "GROUPOPS_LEASE_DURATION_SECONDS": "8",
}


@pytest.mark.parametrize(
    ("duration", "interval", "expected"),
    [("4", None, 1.0), ("8", None, 1.0), ("2", None, 0.5), ("1", None, 0.25), ("2", "0.3", 0.3)],
)
def test_a_short_lease_renews_or_beats_four_times_per_duration(
    duration: str, interval: str | None, expected: float
) -> None:
    env = {**POD_ENV, "GROUPOPS_LEASE_DURATION_SECONDS": duration}
    if interval is not None:
        env["GROUPOPS_RENEW_INTERVAL_SECONDS"] = interval
    lease = RuntimeSettings.from_env(env).lease
    assert lease.renew_interval_s == expected
    assert lease.renew_interval_s < lease.renew_deadline_s == 0.75 * int(duration)


@pytest.mark.parametrize(
    ("interval", "expected", "refused"),
    [(None, 1.0, False), ("3", 3.0, False), ("0.5", None, True), ("6", None, True)],
)
def test_a_heartbeat_interval_is_read_between_the_renew_interval_and_the_deadline(
    interval: str | None, expected: float | None, refused: bool
) -> None:
    env = {**POD_ENV, "GROUPOPS_HEARTBEAT_ADDRESSES": "op.svc:7946"}  # an 8 s Lease: renew 1 s, deadline 6 s
    if interval is not None:
        env["GROUPOPS_HEARTBEAT_INTERVAL_SECONDS"] = interval
    if refused:
        with pytest.raises(ConsumerConfigError, match="GROUPOPS_HEARTBEAT_INTERVAL_SECONDS"):
            RuntimeSettings.from_env(env)
    else:
        assert RuntimeSettings.from_env(env).lease.beat_interval_s == expected


def test_the_operators_pod_environment_is_read_whole() -> None:
    settings = RuntimeSettings.from_env(POD_ENV)
    assert settings.identity == "orders-processor-0"
    assert settings.namespace == "shop"
    assert settings.delivery is Delivery.PLAN
    assert settings.topics == ("orders", "refunds")
    assert settings.kafka.auto_offset_reset == "latest"
    assert settings.kafka.properties == {
        "security.protocol": "SASL_SSL",
        "fetch.min.bytes": "1",
        "check.crcs": "true",
    }
    assert settings.lease.duration_s == 8
    assert settings.lease.renew_interval_s == 1.0
    assert settings.lease.renew_interval_s < settings.lease.renew_deadline_s < settings.lease.duration_s
    assert settings.plan_configmap == "orders-plan"
    assert settings.lease_name == "orders-orders-processor-0"


@pytest.mark.parametrize(
    "raw", ["2026-11-25T09:00:00Z", "2026-11-25T10:00:00+01:00", "1795597200", "1795597200.0"]
)
def test_the_group_start_is_read_as_rfc3339_or_unix_seconds(raw: str) -> None:
    settings = RuntimeSettings.from_env({**POD_ENV, "GROUPOPS_GROUP_STARTED": raw})
    assert settings.group_started_ms == 1_795_597_200_000


def test_the_release_budget_defaults_to_15_s_and_never_over_half_the_poll_interval() -> None:
    assert RuntimeSettings.from_env(POD_ENV).release_commit_budget_s == 15.0
    short = RuntimeSettings.from_env({**POD_ENV, "GROUPOPS_MAX_POLL_INTERVAL_SECONDS": "6"})
    assert short.release_commit_budget_s == 3.0
    assert RuntimeSettings.from_env(POD_ENV).group_started_ms is None


def test_names_default_to_the_shared_wire_names() -> None:
    env = {k: v for k, v in POD_ENV.items() if k not in ("GROUPOPS_PLAN_CONFIGMAP", "GROUPOPS_LEASE_NAME")}
    settings = RuntimeSettings.from_env(env)
    assert settings.plan_configmap == "orders-plan"
    assert settings.lease_name == "orders-orders-processor-0"


def test_secret_kafka_properties_come_from_the_mounted_files(tmp_path: Path) -> None:
    (tmp_path / "sasl.username").write_text("alice\n")
    (tmp_path / "sasl.password").write_text("s3cret")
    (tmp_path / "..data").mkdir()
    settings = RuntimeSettings.from_env({**POD_ENV, "GROUPOPS_KAFKA_AUTH_DIR": str(tmp_path)})
    assert settings.kafka.properties["sasl.username"] == "alice"
    assert settings.kafka.properties["sasl.password"] == "s3cret"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"GROUPOPS_IDENTITY": ""}, "GROUPOPS_IDENTITY", id="identity missing"),
        pytest.param(
            {"GROUPOPS_KAFKA_BOOTSTRAP_SERVERS": " "}, "GROUPOPS_KAFKA_BOOTSTRAP_SERVERS", id="no bootstrap"
        ),
        pytest.param({"GROUPOPS_DELIVERY": "carrier-pigeon"}, "GROUPOPS_DELIVERY", id="unknown delivery"),
        pytest.param(
            {"GROUPOPS_DELIVERY": "native"}, "GROUPOPS_STRATEGY", id="native with a plan-only strategy"
        ),
        pytest.param(
            {"GROUPOPS_DELIVERY": "native", "GROUPOPS_STRATEGY": "range", "GROUPOPS_TOPICS": ""},
            "GROUPOPS_TOPICS",
            id="native without topics",
        ),
        pytest.param(
            {"GROUPOPS_LEASE_DURATION_SECONDS": "soon"}, "GROUPOPS_LEASE_DURATION_SECONDS", id="not a number"
        ),
        pytest.param(
            {"GROUPOPS_LEASE_DURATION_SECONDS": "2", "GROUPOPS_RENEW_INTERVAL_SECONDS": "1.5"},
            "GROUPOPS_RENEW_DEADLINE_SECONDS",
            id="interval past the deadline",
        ),
        pytest.param(
            {"GROUPOPS_KAFKA_PROPERTIES": "[1]"}, "GROUPOPS_KAFKA_PROPERTIES", id="properties not an object"
        ),
        pytest.param(
            {"GROUPOPS_KAFKA_PROPERTIES": '{"group.id":"other"}'},
            "GROUPOPS_KAFKA_PROPERTIES",
            id="reserved property",
        ),
        pytest.param(
            {"GROUPOPS_KAFKA_AUTH_DIR": "/nonexistent/auth"}, "GROUPOPS_KAFKA_AUTH_DIR", id="auth dir missing"
        ),
        pytest.param({"GROUPOPS_BATCH_SIZE": "0"}, "GROUPOPS_BATCH_SIZE", id="empty batches"),
        pytest.param(
            {"GROUPOPS_GROUP_STARTED": "yesterday"}, "GROUPOPS_GROUP_STARTED", id="start not a time"
        ),
        pytest.param(
            {"GROUPOPS_GROUP_STARTED": "2026-11-25T09:00:00"},
            "GROUPOPS_GROUP_STARTED",
            id="start without zone",
        ),
        pytest.param(
            {"GROUPOPS_RELEASE_COMMIT_SECONDS": "200"},
            "GROUPOPS_RELEASE_COMMIT_SECONDS",
            id="release budget over half the poll interval",
        ),
    ],
)
def test_a_bad_setting_is_refused_naming_it(change: dict[str, str], field: str) -> None:
    with pytest.raises(ConsumerConfigError) as caught:
        RuntimeSettings.from_env({**POD_ENV, **change})
    assert caught.value.field == field


def test_processors_load_by_name() -> None:
    assert load_processor(None).one is noop
    assert load_processor("groupops.consumer.processors:sleep_1ms").one is sleep_1ms
    for bad in (
        "no-colon",
        "groupops.nothing_here:x",
        "groupops.consumer.processors:missing",
        "json:__doc__",
    ):
        with pytest.raises(ConsumerConfigError):
            load_processor(bad)


class BatchHandler:
    @staticmethod
    def process_batch(messages: list[int]) -> None:
        del messages


def test_an_object_with_process_batch_processes_batches() -> None:
    processor = load_processor(f"{__name__}:BatchHandler")
    assert processor.one is None
    assert processor.batch is not None


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        pytest.param([], {}, "(--policy or GROUPOPS_POLICY)", id="nothing set"),
        pytest.param(
            ["--delivery", "native", "--strategy", "lag"],
            POD_ENV,
            "(--strategy or GROUPOPS_STRATEGY)",
            id="native with lag",
        ),
        pytest.param(
            ["--processor", "nope"], POD_ENV, "(--processor or GROUPOPS_PROCESSOR)", id="bad processor"
        ),
    ],
)
def test_the_command_reports_bad_settings_in_one_line_with_exit_code_2(
    args: list[str], env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in list(POD_ENV):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(app, ["consume", *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Error: ")
    assert lines[0].endswith(message)
