"""The policy spec parser accepts every example and names the field of every bad spec."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from groupops.assign import STRATEGY_NAMES
from groupops.controller import spec_schema
from groupops.controller.spec import SpecError, parse_duration, parse_policy

EXAMPLES = sorted((Path(__file__).parents[3] / "examples" / "policies").glob("*.yaml"))

BASE: dict[str, Any] = {
    "kafka": {"bootstrapServers": "k:9092"},
    "groupId": "orders",
    "topics": ["orders"],
    "lagSource": {"type": "static", "static": {"lags": {"orders": [1, 2, 3]}}},
    "consumers": {"replicas": 3},
}


def with_(path: str, value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE)
    *parents, leaf = path.split(".")
    node = spec
    for key in parents:
        node = node.setdefault(key, {})
    if value is _DELETE:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return spec


_DELETE = object()


def native(**consumers: Any) -> dict[str, Any]:
    """A native-delivery spec (a Kafka assignor), with more `consumers` fields."""
    spec = with_("strategy", {"type": "range"})
    spec["consumers"] = {"replicas": 3, "delivery": "native", **consumers}
    return spec


def with_properties(spec: dict[str, Any], **properties: str) -> dict[str, Any]:
    spec["kafka"]["properties"] = {key.replace("_", "."): value for key, value in properties.items()}
    return spec


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_parses(path: Path) -> None:
    document = yaml.safe_load(path.read_text())
    spec = parse_policy(document["spec"])
    assert spec.group_id == document["spec"]["groupId"]


def test_defaults_are_the_crd_defaults() -> None:
    spec = parse_policy(with_("consumers", {}))
    assert spec.strategy.type == "lag"
    assert spec.strategy.auto_offset_reset == "latest"
    assert spec.rebalance.interval_seconds == 60.0
    assert spec.rebalance.imbalance_threshold == 1.2
    assert spec.rebalance.approval == "auto"
    assert spec.consumers.replicas == 1
    assert spec.consumers.delivery == "plan"
    assert spec.consumers.max_poll_interval_seconds == 300
    assert spec.dry_run is False


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param(with_("groupId", _DELETE), "spec.groupId", id="missing-group"),
        pytest.param(with_("groupId", "bad group"), "spec.groupId", id="group-with-space"),
        pytest.param(with_("topics", []), "spec.topics", id="no-topics"),
        pytest.param(with_("topics", ["orders", "orders"]), "spec.topics[1]", id="duplicate-topic"),
        pytest.param(with_("topics", ["bad topic!"]), "spec.topics[0]", id="topic-name"),
        pytest.param(with_("kafka", {}), "spec.kafka.bootstrapServers", id="no-bootstrap"),
        pytest.param(with_("strategy", {"type": "random"}), "spec.strategy.type", id="unknown-strategy"),
        pytest.param(
            with_("strategy", {"autoOffsetReset": "none"}), "spec.strategy.autoOffsetReset", id="offset-reset"
        ),
        pytest.param(with_("consumers", {"replicas": -1}), "spec.consumers.replicas", id="negative-replicas"),
        pytest.param(
            with_("consumers", {"replicas": 2, "autoscale": {"max": 3, "targetLagPerReplica": 1}}),
            "spec.consumers.autoscale",
            id="replicas-and-autoscale",
        ),
        pytest.param(
            with_("consumers", {"autoscale": {"min": 5, "max": 3, "targetLagPerReplica": 1}}),
            "spec.consumers.autoscale.min",
            id="autoscale-min-above-max",
        ),
        pytest.param(
            with_("consumers", {"delivery": "native"}),
            "spec.consumers.delivery",
            id="native-with-lag-strategy",
        ),
        pytest.param(
            with_("consumers", {"replicas": 3, "priorities": {"orders-7": 1}}),
            "spec.consumers.priorities.orders-7",
            id="priority-beyond-replicas",
        ),
        pytest.param(
            with_("consumers", {"replicas": 3, "priorities": {"other-0": 1}}),
            "spec.consumers.priorities.other-0",
            id="priority-foreign-identity",
        ),
        pytest.param(
            with_("lagSource", {"type": "kafka", "static": {"lags": {"orders": [1]}}}),
            "spec.lagSource.static",
            id="static-lags-with-kafka-source",
        ),
        pytest.param(
            with_("lagSource", {"type": "prometheus"}), "spec.lagSource.prometheus", id="prometheus-no-url"
        ),
        pytest.param(
            with_("lagSource", {"type": "static", "static": {"lags": {"refunds": [1]}}}),
            "spec.lagSource.static.lags.refunds",
            id="static-lag-unknown-topic",
        ),
        pytest.param(
            with_("lagSource", {"type": "static", "static": {"lags": {"orders": [1, -2]}}}),
            "spec.lagSource.static.lags.orders[1]",
            id="negative-lag",
        ),
        pytest.param(
            with_("rebalance", {"interval": "soon"}), "spec.rebalance.interval", id="interval-format"
        ),
        pytest.param(
            with_("rebalance", {"imbalanceThreshold": 0.5}),
            "spec.rebalance.imbalanceThreshold",
            id="threshold",
        ),
        pytest.param(with_("rebalance", {"approval": "maybe"}), "spec.rebalance.approval", id="approval"),
        pytest.param(
            with_("kafka", {"bootstrapServers": "k:1", "properties": {"sasl.password": "x"}}),
            "spec.kafka.properties.sasl.password",
            id="secret-in-properties",
        ),
        pytest.param(
            with_("consumers", {"zones": ["a"]}), "spec.consumers.zones", id="zones-without-rack-aware"
        ),
        pytest.param(
            with_("consumers", {"maxPollIntervalSeconds": 4}),
            "spec.consumers.maxPollIntervalSeconds",
            id="max-poll-interval-below-5s",
        ),
        pytest.param(
            with_("consumers", {"maxPollIntervalSeconds": 86_401}),
            "spec.consumers.maxPollIntervalSeconds",
            id="max-poll-interval-above-a-day",
        ),
        pytest.param(
            with_("consumers", {"maxPollIntervalSeconds": "5m"}),
            "spec.consumers.maxPollIntervalSeconds",
            id="max-poll-interval-not-seconds",
        ),
        pytest.param(
            with_("consumers", {"onError": {"action": "crash"}}),
            "spec.consumers.onError.action",
            id="on-error-unknown-action",
        ),
        pytest.param(
            with_("consumers", {"onError": {"action": "deadLetter"}}),
            "spec.consumers.onError.deadLetterTopic",
            id="dead-letter-without-topic",
        ),
        pytest.param(
            with_("consumers", {"onError": {"deadLetterTopic": "dlq"}}),
            "spec.consumers.onError.deadLetterTopic",
            id="dead-letter-topic-without-the-action",
        ),
        pytest.param(
            with_(
                "consumers", {"maxPollIntervalSeconds": 20, "onError": {"retries": 5, "backoffSeconds": 1}}
            ),
            "spec.consumers.onError.backoffSeconds",
            id="on-error-retries-outlast-the-poll-interval",
        ),
        pytest.param(
            with_("consumers", {"onError": {"retries": 101}}), "spec.consumers.onError.retries", id="retries"
        ),
        pytest.param(
            native(maxPollIntervalSeconds=30),
            "spec.consumers.maxPollIntervalSeconds",
            id="native-max-poll-interval-below-the-session-timeout",
        ),
        pytest.param(
            with_properties(
                with_("consumers", {"maxPollIntervalSeconds": 60}), max_poll_interval_ms="600000"
            ),
            "spec.kafka.properties.max.poll.interval.ms",
            id="max-poll-interval-also-as-a-different-property",
        ),
    ],
)
def test_bad_spec_names_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_policy(spec)
    assert caught.value.field == field
    assert field in str(caught.value)


@pytest.mark.parametrize(
    ("spec", "seconds"),
    [
        pytest.param(with_("consumers", {"maxPollIntervalSeconds": 6}), 6, id="plan-short"),
        pytest.param(
            with_properties(native(maxPollIntervalSeconds=6), session_timeout_ms="6000"),
            6,
            id="native-short-with-a-short-session",
        ),
        pytest.param(
            with_properties(with_("consumers", {"maxPollIntervalSeconds": 60}), max_poll_interval_ms="60000"),
            60,
            id="the-same-value-as-a-property",
        ),
    ],
)
def test_max_poll_interval_within_what_librdkafka_accepts(spec: dict[str, Any], seconds: int) -> None:
    assert parse_policy(spec).consumers.max_poll_interval_seconds == seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("60s", 60.0), ("1m30s", 90.0), ("500ms", 0.5), ("2h", 7200.0), ("1.5m", 90.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, where="x") == seconds


def test_autoscale_sizes_by_lag_within_bounds() -> None:
    spec = parse_policy(with_("consumers", {"autoscale": {"min": 1, "max": 4, "targetLagPerReplica": 100}}))
    assert spec.consumers.autoscale is not None
    assert [spec.consumers.autoscale.replicas_for(lag) for lag in (0, 100, 101, 350, 10_000)] == [
        1,
        1,
        2,
        4,
        4,
    ]


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        pytest.param(
            with_("consumers", {"replicas": 3, "onError": {"retries": "3"}}),
            "spec.consumers.onError.retries",
            "expected an integer in [0, 100], got '3'",
            id="a-number-in-quotes",
        ),
        pytest.param(
            with_("consumers", {"replicas": 3, "priorities": {"orders-0": 5, "orders-1": "high"}}),
            "spec.consumers.priorities.orders-1",
            "expected an integer in [0, 1000000], got 'high'",
            id="the-key-of-the-bad-entry-of-a-map",
        ),
        pytest.param(
            with_("lagSource", {"type": "static", "static": {"lags": {"orders": [1, "2"]}}}),
            "spec.lagSource.static.lags.orders[1]",
            "got '2'",
            id="an-item-of-a-list-in-a-map",
        ),
        pytest.param(
            with_("consumers", {"replicas": 3, "template": {"metadata": {"labels": {"team": 7}}}}),
            "spec.consumers.template.metadata.labels.team",
            "expected str, got int",
            id="a-label-of-the-pod-template",
        ),
        pytest.param(
            with_("kafka", {"bootstrapServers": "k:9092", "authSecretRef": {"name": ["auth"]}}),
            "spec.kafka.authSecretRef.name",
            "expected str, got array",
            id="a-secret-name-as-a-list",
        ),
        pytest.param(
            with_("strategy", {"rackAware": "yes"}),
            "spec.strategy.rackAware",
            "expected true or false, got 'yes'",
            id="a-boolean-in-words",
        ),
        pytest.param(
            with_("consumers", {"replicas": True}),
            "spec.consumers.replicas",
            "expected an integer in [0, 1000], got True",
            id="a-boolean-for-an-integer",
        ),
        pytest.param(
            with_("strategy", {"type": "random"}),
            "spec.strategy.type",
            f"choose one of {', '.join(STRATEGY_NAMES)}, got 'random'",
            id="a-choice-names-the-choices",
        ),
        pytest.param(
            with_("consumers", {"replicas": 3, "zones": "a,b"}),
            "spec.consumers.zones",
            "expected a list of at most 32 zone names, got 'a,b'",
            id="a-list-as-one-string",
        ),
        pytest.param(
            with_("consumers", {"autoscale": {"targetLagPerReplica": 10}}),
            "spec.consumers.autoscale.max",
            "required",
            id="a-required-field-deep-in-the-spec",
        ),
    ],
)
def test_a_wrong_type_deep_in_the_spec_names_its_path(spec: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_policy(spec)
    assert caught.value.field == field
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param({**BASE, "dryrun": True}, "spec.dryrun", id="at-the-top"),
        pytest.param(
            with_("strategy", {"type": "lag", "rackaware": True}), "spec.strategy.rackaware", id="a-typo"
        ),
        pytest.param(
            with_("kafka", {"bootstrapServers": "k:9092", "authSecretRef": {"name": "a", "namespace": "b"}}),
            "spec.kafka.authSecretRef.namespace",
            id="secret-in-another-namespace",
        ),
        pytest.param(
            with_("lagSource", {"type": "static", "static": {"lags": {"orders": [1]}, "partitions": 1}}),
            "spec.lagSource.static.partitions",
            id="static-lag-settings",
        ),
        pytest.param(
            with_("consumers", {"replicas": 3, "onError": {"retry": 3}}),
            "spec.consumers.onError.retry",
            id="on-error",
        ),
        pytest.param(
            with_("consumers", {"replicas": 3, "template": {"containers": [{"name": "consumer"}]}}),
            "spec.consumers.template.containers",
            id="containers-outside-the-pod-spec",
        ),
        pytest.param(
            with_("consumers", {"replicas": 3, "template": {"metadata": {"name": "mine"}}}),
            "spec.consumers.template.metadata.name",
            id="a-pod-name-in-the-template",
        ),
    ],
)
def test_an_unknown_field_is_refused_where_the_crd_refuses_it(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_policy(spec)
    assert caught.value.field == field
    assert caught.value.message.startswith("unknown field")


def test_free_form_parts_of_the_crd_stay_free_form() -> None:
    """kafka.properties, a lag source's own settings (the source parses them) and the pod
    template's spec take any field, and are handed on as written."""
    spec = with_("lagSource", {"type": "prometheus", "prometheus": {"url": "http://p:9090", "future": 1}})
    spec["kafka"]["properties"] = {"client.rack": "a", "fetch.max.bytes": "1048576"}
    template = {
        "metadata": {"labels": {"team": "x"}},
        "spec": {"containers": [{"name": "c"}], "anything": [1]},
    }
    spec["consumers"]["template"] = template
    policy = parse_policy(spec)
    assert policy.lag_source.settings == {"url": "http://p:9090", "future": 1}
    assert policy.kafka.properties == {"client.rack": "a", "fetch.max.bytes": "1048576"}
    assert policy.consumers.template is template


def test_a_property_value_is_not_repeated_in_the_error() -> None:
    """A value under kafka.properties may be a misplaced secret: the error names the key only."""
    spec = copy.deepcopy(BASE)
    spec["kafka"]["properties"] = {"client.rack": "a", "sasl.username": 123456789}
    with pytest.raises(SpecError) as caught:
        parse_policy(spec)
    assert caught.value.field == "spec.kafka.properties.sasl.username"
    assert "123456789" not in str(caught.value)


CRD = Path(__file__).parents[3] / "crds" / "consumergrouppolicy.yaml"
# Closed in the CRD, free-form in the parser: each lag source parses its own settings (`from_spec`
# in lag/<type>.py), and reports a bad one as LagSourceInvalid.
PARSED_BY_THE_LAG_SOURCE = {"spec.lagSource.kafka", "spec.lagSource.prometheus", "spec.lagSource.burrow"}


def closed_in_the_crd(schema: dict[str, Any], path: str = "spec") -> Iterator[tuple[str, Any]]:
    if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        yield path, (set(schema["properties"]), set(schema.get("required", [])))
        for name, child in schema["properties"].items():
            yield from closed_in_the_crd(child, f"{path}.{name}")


def closed_in_the_parser(info: Any, path: str = "spec") -> Iterator[tuple[str, Any]]:
    while isinstance(info, msgspec.inspect.Metadata | msgspec.inspect.UnionType):
        info = info.type if isinstance(info, msgspec.inspect.Metadata) else info.types[0]
    if isinstance(info, msgspec.inspect.StructType):
        assert info.forbid_unknown_fields, path
        yield path, ({f.encode_name for f in info.fields}, {f.encode_name for f in info.fields if f.required})
        for f in info.fields:
            yield from closed_in_the_parser(f.type, f"{path}.{f.encode_name}")


def test_the_parser_closes_the_objects_the_crd_closes_with_the_same_fields() -> None:
    crd = yaml.safe_load(CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    expected = {
        path: fields
        for path, fields in closed_in_the_crd(schema)
        if not any(path == parsed or path.startswith(f"{parsed}.") for parsed in PARSED_BY_THE_LAG_SOURCE)
    }
    assert dict(closed_in_the_parser(msgspec.inspect.type_info(spec_schema.PolicyDoc))) == expected
