"""The ConsumerGroupPolicy spec's schema as msgspec structs, for `spec.parse_policy` (§5).

They mirror crds/consumergrouppolicy.yaml: camelCase names, nesting, bounds, lengths, patterns,
enums and defaults. A `description` in a Meta is what the value should be, as the error message
says it ("expected <description>, got <value>"). The frozen dataclasses of `controller/spec.py` are
what the operator uses; these are only the decoding step before them.

Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

import msgspec
from msgspec import Meta, Struct

from groupops.assign import STRATEGY_NAMES
from groupops.lag.registry import SOURCE_TYPES
from groupops.planner.onerror import BACKOFF_MAX_S, MAX_RETRIES, ErrorAction

__all__ = [
    "APPROVALS",
    "DEFAULT_MAX_POLL_INTERVAL_S",
    "DELIVERIES",
    "ERROR_ACTIONS",
    "MAX_CAPACITY",
    "MAX_POLL_INTERVAL_RANGE",
    "MAX_PRIORITY",
    "MAX_REPLICAS",
    "MAX_STABILIZATION_WINDOW_S",
    "MAX_TARGET_TIME_LAG_S",
    "NATIVE_STRATEGIES",
    "OFFSET_RESETS",
    "PROPOSAL_ID",
    "AutoscaleDoc",
    "BehaviorDoc",
    "BootstrapServers",
    "CapacityDoc",
    "ClusterRefDoc",
    "ConsumersDoc",
    "KafkaDoc",
    "LagSourceDoc",
    "OnErrorDoc",
    "PolicyDoc",
    "RebalanceDoc",
    "ScaleDownDoc",
    "ScaleUpDoc",
    "SecretRefDoc",
    "StaticDoc",
    "StrategyDoc",
    "TemplateDoc",
    "TemplateMetadataDoc",
]

NATIVE_STRATEGIES = frozenset({"range", "roundrobin", "cooperative-sticky"})
DELIVERIES = ("plan", "native")
APPROVALS = ("auto", "manual")
PROPOSAL_ID = re.compile(r"p-[0-9a-f]{12}")
"""A proposal's id as status.proposal.id shows it and spec.rebalance.approvedProposal names it."""
OFFSET_RESETS = ("earliest", "latest")
MAX_REPLICAS = 1000
ERROR_ACTIONS = tuple(action.value for action in ErrorAction)
MAX_PRIORITY = 1_000_000
MAX_CAPACITY = 1000.0
"""A replica's capacity relative to the others (consumers.capacity): beyond 1000 times the speed
of another replica, the slower one is better left out."""
DEFAULT_MAX_POLL_INTERVAL_S = 300
"""Kafka's max.poll.interval.ms default (also the CRD's, and the consumer's without the variable)."""
MAX_POLL_INTERVAL_RANGE = (5, 86_400)
MAX_TARGET_TIME_LAG_S = 604_800
"""spec.targetTimeLagSeconds at most a week."""
MAX_STABILIZATION_WINDOW_S = 3600
"""HPA's own limit on behavior.scaleUp/scaleDown.stabilizationWindowSeconds (one hour)."""


if TYPE_CHECKING:  # choices kept as tuples (two from registries): msgspec checks a Literal of them
    _StrategyType = str
    _SourceType = str
    _OffsetReset = str
    _Approval = str
    _Delivery = str
    _ErrorAction = str
else:
    _StrategyType = Literal[STRATEGY_NAMES]
    _SourceType = Literal[SOURCE_TYPES]
    _OffsetReset = Literal[OFFSET_RESETS]
    _Approval = Literal[APPROVALS]
    _Delivery = Literal[DELIVERIES]
    _ErrorAction = Literal[ERROR_ACTIONS]

_NAME_CHARACTERS = "^[a-zA-Z0-9._-]+$"
_TopicName = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=249,
        pattern=_NAME_CHARACTERS,
        description="a Kafka topic name of letters, digits, '.', '_' and '-' (at most 249)",
    ),
]
_Replicas = Annotated[int, Meta(ge=0, le=MAX_REPLICAS)]
_Lag = Annotated[int, Meta(ge=0, le=2**63 - 1, description="a lag: an integer >= 0 (int64)")]
_Capacity = Annotated[
    float, Meta(gt=0, le=MAX_CAPACITY, description="a capacity: a number > 0 and at most 1000")
]
_Settings = dict[str, Any]
"""A lag source's settings object, parsed by the source itself (`from_spec` in lag/<type>.py)."""


class _Doc(Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """An object the schema closes (no x-kubernetes-preserve-unknown-fields): unknown fields are
    refused, as the API server refuses them. Subclasses inherit the configuration (`frozen=True`
    is repeated for mypy, which does not see it inherited)."""


class SecretRefDoc(_Doc, frozen=True):
    name: Annotated[str, Meta(min_length=1, max_length=253)]


BootstrapServers = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=2048,
        pattern=r"^[^\s,]+(,[^\s,]+)*$",
        description="a comma-separated list of host:port, without spaces",
    ),
]


class ClusterRefDoc(_Doc, frozen=True):
    name: Annotated[str, Meta(min_length=1, max_length=253)]


class KafkaDoc(_Doc, frozen=True):
    bootstrap_servers: BootstrapServers | None = None
    cluster_ref: ClusterRefDoc | None = None
    auth_secret_ref: SecretRefDoc | None = None
    properties: Annotated[dict[str, Annotated[str, Meta(max_length=4096)]], Meta(max_length=64)] = {}


class StrategyDoc(_Doc, frozen=True):
    type: _StrategyType = "lag"
    auto_offset_reset: _OffsetReset = "latest"
    rack_aware: bool = False
    failback: bool = True


class StaticDoc(_Doc, frozen=True):
    # The schema's 10,000 lags per topic is not repeated: plans of larger static topics are how
    # the plan-size limits are tested (tests/unit/controller/test_reconcile_steps.py).
    lags: Annotated[
        dict[str, Annotated[list[_Lag], Meta(min_length=1, description="a list of lags, one per partition")]],
        Meta(min_length=1, max_length=100, description="lags of 1 to 100 topics"),
    ]


class LagSourceDoc(_Doc, frozen=True):
    """One optional field per type of the lag source registry (`SOURCE_TYPES`)."""

    type: _SourceType = "kafka"
    kafka: _Settings | None = None
    prometheus: _Settings | None = None
    burrow: _Settings | None = None
    static: StaticDoc | None = None
    forecast: _Settings | None = None


class RebalanceDoc(_Doc, frozen=True):
    interval: Annotated[str, Meta(max_length=32, description="a duration like 30s, 5m or 1m30s")] = "60s"
    imbalance_threshold: Annotated[float, Meta(ge=1, le=100)] = 1.2
    max_moves_per_rebalance: Annotated[int, Meta(ge=1, le=1_000_000)] | None = None
    min_improvement: Annotated[float, Meta(ge=0, le=0.9)] = 0.1
    cooldown_seconds: Annotated[int, Meta(ge=0, le=86_400)] = 30
    approval: _Approval = "auto"
    approved_proposal: (
        Annotated[
            str,
            Meta(
                pattern=f"^{PROPOSAL_ID.pattern}$",
                description="a proposal id as status.proposal.id shows it (p-<12 hex digits>)",
            ),
        ]
        | None
    ) = None


_WindowSeconds = Annotated[int, Meta(ge=0, le=MAX_STABILIZATION_WINDOW_S)]


class ScaleUpDoc(_Doc, frozen=True):
    stabilization_window_seconds: _WindowSeconds = 0


class ScaleDownDoc(_Doc, frozen=True):
    stabilization_window_seconds: _WindowSeconds = 300


class BehaviorDoc(_Doc, frozen=True):
    """HPA's `behavior`, its stabilisation windows only (planner/damping.py)."""

    scale_up: ScaleUpDoc = ScaleUpDoc()
    scale_down: ScaleDownDoc = ScaleDownDoc()


class AutoscaleDoc(_Doc, frozen=True):
    max: Annotated[int, Meta(ge=1, le=MAX_REPLICAS)]
    target_lag_per_replica: Annotated[int, Meta(ge=1, le=10**15)]
    min: _Replicas = 1
    behavior: BehaviorDoc = BehaviorDoc()


class OnErrorDoc(_Doc, frozen=True):
    retries: Annotated[int, Meta(ge=0, le=MAX_RETRIES)] = 3
    backoff_seconds: Annotated[float, Meta(ge=0, le=BACKOFF_MAX_S)] | None = None
    action: _ErrorAction = ErrorAction.STOP.value
    dead_letter_topic: Annotated[str, Meta(min_length=1)] | None = None


class TemplateMetadataDoc(_Doc, frozen=True):
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class TemplateDoc(_Doc, frozen=True):
    metadata: TemplateMetadataDoc | None = None
    spec: dict[str, Any] | None = None
    """A PodSpec, free-form as in the schema: the API server judges it when the pods are created."""


class CapacityDoc(_Doc, frozen=True):
    """`consumers.capacity`: a replica's speed relative to the others, for the lag-aware
    strategies (`lag`, `balanced`); byIdentity wins over byZone, which wins over default."""

    default: _Capacity = 1.0
    by_identity: Annotated[dict[str, _Capacity], Meta(max_length=1000)] = {}
    by_zone: Annotated[dict[str, _Capacity], Meta(max_length=32)] = {}


class ConsumersDoc(_Doc, frozen=True):
    replicas: _Replicas | None = None
    """None: not given (1 without autoscale); told apart from 1 for "replicas xor autoscale"."""
    autoscale: AutoscaleDoc | None = None
    priorities: Annotated[dict[str, Annotated[int, Meta(ge=0, le=MAX_PRIORITY)]], Meta(max_length=1000)] = {}
    capacity: CapacityDoc = CapacityDoc()
    delivery: _Delivery = "plan"
    max_poll_interval_seconds: Annotated[
        int, Meta(ge=MAX_POLL_INTERVAL_RANGE[0], le=MAX_POLL_INTERVAL_RANGE[1])
    ] = DEFAULT_MAX_POLL_INTERVAL_S
    on_error: OnErrorDoc = OnErrorDoc()
    zones: Annotated[
        tuple[Annotated[str, Meta(min_length=1, max_length=63, description="a zone name")], ...],
        Meta(max_length=32, description="a list of at most 32 zone names"),
    ] = ()
    template: TemplateDoc | None = None


class PolicyDoc(_Doc, frozen=True):
    kafka: KafkaDoc
    group_id: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=200,
            pattern=_NAME_CHARACTERS,
            description="a group id of letters, digits, '.', '_' and '-' (at most 200)",
        ),
    ]
    topics: Annotated[
        tuple[_TopicName, ...], Meta(min_length=1, max_length=100, description="1 to 100 topics")
    ]
    strategy: StrategyDoc = StrategyDoc()
    lag_source: LagSourceDoc = LagSourceDoc()
    rebalance: RebalanceDoc = RebalanceDoc()
    consumers: ConsumersDoc = ConsumersDoc()
    dry_run: bool = False
    target_time_lag_seconds: (
        Annotated[
            float,
            Meta(gt=0, le=MAX_TARGET_TIME_LAG_S, description="a number of seconds > 0 (at most a week)"),
        ]
        | None
    ) = None


# msgspec builds a Struct type's decoding information on the first decode or convert that meets
# it, running Python code (annotations) midway: two reconcile threads parsing their first specs
# at once could meet a half-built one and crash the process (seen: a segfault in msgspec's _core
# when an operator started with two policies). Building it here, on import, in one thread, leaves
# nothing to build later.
_TYPE_INFO_BUILT_ON_IMPORT: Final = msgspec.json.Decoder(PolicyDoc)
