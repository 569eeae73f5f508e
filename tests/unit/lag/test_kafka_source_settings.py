"""The `kafka` lag source's settings and error mapping, without a broker: librdkafka's own error
objects are mapped onto our tree, and bad settings fail before any connection."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from typer.testing import CliRunner

from groupops.cli import app
from groupops.lag import (
    LagAuthorizationError,
    LagError,
    LagSourceConfigError,
    LagSourceUnavailable,
    UnknownTopicError,
)
from groupops.lag.kafka import (
    KafkaLagSettings,
    KafkaLagSource,
    _map_error,
    from_spec,
    normalize_auto_offset_reset,
)
from groupops.lag.registry import SourceContext


@pytest.mark.parametrize(
    ("given", "normalized"),
    [
        pytest.param("latest", "latest", id="latest"),
        pytest.param("largest", "latest", id="librdkafka-largest"),
        pytest.param("END", "latest", id="end-any-case"),
        pytest.param("earliest", "earliest", id="earliest"),
        pytest.param("smallest", "earliest", id="librdkafka-smallest"),
        pytest.param("beginning", "earliest", id="beginning"),
        pytest.param("none", "none", id="none-kept"),
    ],
)
def test_auto_offset_reset_spellings(given: str, normalized: str) -> None:
    assert normalize_auto_offset_reset(given) == normalized


def test_unknown_auto_offset_reset_is_a_config_error() -> None:
    with pytest.raises(LagSourceConfigError, match=r"auto\.offset\.reset"):
        KafkaLagSettings(bootstrap_servers="127.0.0.1:9092", auto_offset_reset="sometimes")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"bootstrap_servers": " "}, "bootstrap_servers is empty", id="empty-bootstrap"),
        pytest.param(
            {"bootstrap_servers": "a:1", "client_config": {"bootstrap.servers": "b:2"}},
            "bootstrap.servers",
            id="bootstrap-twice",
        ),
        pytest.param({"bootstrap_servers": "a:1", "timeout_s": 0}, "timeout_s", id="zero-timeout"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(LagSourceConfigError, match=message):
        KafkaLagSettings(**kwargs)  # type: ignore[arg-type]


def test_an_unknown_librdkafka_property_is_a_config_error() -> None:
    settings = KafkaLagSettings(bootstrap_servers="127.0.0.1:9092", client_config={"sasl.mechanizm": "PLAIN"})
    with pytest.raises(LagSourceConfigError, match=r"sasl\.mechanizm"):
        KafkaLagSource(settings)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        pytest.param(KafkaError.UNKNOWN_TOPIC_OR_PART, UnknownTopicError, id="unknown-topic"),
        pytest.param(KafkaError.TOPIC_AUTHORIZATION_FAILED, LagAuthorizationError, id="topic-acl"),
        pytest.param(KafkaError.GROUP_AUTHORIZATION_FAILED, LagAuthorizationError, id="group-acl"),
        pytest.param(KafkaError.SASL_AUTHENTICATION_FAILED, LagAuthorizationError, id="sasl"),
        pytest.param(KafkaError._TIMED_OUT, LagSourceUnavailable, id="timed-out"),
        pytest.param(KafkaError._TRANSPORT, LagSourceUnavailable, id="transport"),
        pytest.param(KafkaError.NOT_COORDINATOR, LagSourceUnavailable, id="transient-coordinator"),
        pytest.param(KafkaError.INVALID_GROUP_ID, LagSourceConfigError, id="invalid-group-id"),
        pytest.param(KafkaError.POLICY_VIOLATION, LagError, id="anything-else-is-a-lag-error"),
    ],
)
def test_librdkafka_errors_map_onto_our_tree(code: int, expected: type[LagError]) -> None:
    mapped = _map_error(KafkaException(KafkaError(code)), "topic 'orders'")
    assert isinstance(mapped, expected)
    assert "orders" in str(mapped)


def test_from_spec_takes_the_connection_from_the_policy_context() -> None:
    context = SourceContext(
        bootstrap_servers="127.0.0.1:9092", auto_offset_reset="largest", timeout_seconds=4
    )
    with from_spec({"requireGroup": True}, context) as source:
        assert source.settings.bootstrap_servers == "127.0.0.1:9092"
        assert source.settings.auto_offset_reset == "latest"
        assert source.settings.timeout_s == 4
        assert source.settings.require_group is True


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param({"timeout": 3}, "lagSource.kafka.timeout", id="unknown-field"),
        pytest.param({"timeoutSeconds": "3"}, "lagSource.kafka.timeoutSeconds", id="string-number"),
        pytest.param({"timeoutSeconds": True}, "lagSource.kafka.timeoutSeconds", id="bool-number"),
        pytest.param({"requireGroup": 1}, "lagSource.kafka.requireGroup", id="int-flag"),
    ],
)
def test_from_spec_rejects_bad_fields_by_name(spec: dict[str, object], field: str) -> None:
    with pytest.raises(LagSourceConfigError, match=field):
        from_spec(spec, SourceContext(bootstrap_servers="127.0.0.1:9092"))


@pytest.mark.parametrize(
    ("args", "where"),
    [
        pytest.param(
            ["lag", "-b", "127.0.0.1:9", "-g", "g", "--auto-offset-reset", "soon"], "--auto-offset-reset"
        ),
        pytest.param(["lag", "-b", "127.0.0.1:9", "-g", "g", "--config", "no-equals-sign"], "(--config)"),
        pytest.param(["assign", "--lag-from-kafka", "--group", "g"], "(--bootstrap)"),
        pytest.param(["assign", "--lag-from-kafka", "--bootstrap", "127.0.0.1:9"], "(--group)"),
    ],
)
def test_bad_command_line_input_exits_2_with_one_line(args: list[str], where: str) -> None:
    document = '{"strategy": "lag", "topics": {"t": 1}, "members": [{"member_id": "C0", "topics": ["t"]}]}'
    result = CliRunner().invoke(app, args, input=document)
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
    assert where in result.stderr
