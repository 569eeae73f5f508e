"""The one factory from a policy's `lagSource.type` to a lag source.

Contract for a source module: it exposes `from_spec(spec, context) -> LagSource`, where `spec` is
the policy's `lagSource.<type>` object (may be empty) and `context` the `SourceContext` below;
bad settings raise `LagSourceConfigError` naming the field. `kafka` (lag/kafka.py) and `forecast`
(lag/forecast.py, the Spark pipeline's output) are imported when first asked for, so this module
works while they are absent and the pure parts never pay for confluent-kafka at import.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from groupops.lag import burrow, prometheus, static
from groupops.lag.base import LagSource, LagSourceConfigError, PartitionCounts, SecretReader

if TYPE_CHECKING:
    from groupops.lag.history import HistorySink

__all__ = ["FIXED_SOURCE_TYPES", "SOURCE_TYPES", "SourceContext", "SourceFactory", "build_lag_source"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceContext:
    """What a source may need beyond its own spec.

    bootstrap_servers / client_config: the policy's Kafka connection (client_config holds the
    librdkafka properties from the auth Secret: never log it); auto_offset_reset: the lag rule for
    partitions without a commit; timeout_seconds: the budget of one read; history: where the
    `kafka` source appends the offsets it read (None: nowhere).
    secrets: reads the Secrets an HTTP source's `auth` and `tls` name, in the policy's namespace
    (None: this context reads none, and a spec naming one is refused).
    partition_counts: topic partition counts from the policy's Kafka cluster, for the sources
    that only see partitions with series (`prometheus`, `burrow`); None: a connection of their
    own from bootstrap_servers and client_config, for one request per read. The operator passes
    its shared per-cluster readers (`controller.lagaccess`).
    """

    bootstrap_servers: str
    client_config: Mapping[str, str] = field(default_factory=dict)
    auto_offset_reset: str = "latest"
    timeout_seconds: float = 10.0
    history: HistorySink | None = None
    secrets: SecretReader | None = None
    partition_counts: PartitionCounts | None = None

    def __repr__(self) -> str:  # keep secrets out of logs and tracebacks
        keys = len(self.client_config)
        return f"SourceContext(bootstrap_servers={self.bootstrap_servers!r}, client_config=<{keys} keys>)"


SourceFactory = Callable[[Mapping[str, Any], SourceContext], LagSource]


def _lazy(module_name: str, type_name: str) -> SourceFactory:
    def factory(spec: Mapping[str, Any], context: SourceContext) -> LagSource:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise LagSourceConfigError(f"lag source {type_name!r} is not available in this build: {e}") from e
        from_spec = getattr(module, "from_spec", None)
        if from_spec is None:
            raise LagSourceConfigError(
                f"lag source {type_name!r}: {module_name} has no from_spec(spec, context)"
            )
        source: LagSource = from_spec(spec, context)
        return source

    return factory


_FACTORIES: dict[str, SourceFactory] = {
    "kafka": _lazy("groupops.lag.kafka", "kafka"),
    "prometheus": prometheus.from_spec,
    "burrow": burrow.from_spec,
    "static": static.from_spec,
    "forecast": _lazy("groupops.lag.forecast", "forecast"),
}

SOURCE_TYPES: tuple[str, ...] = tuple(_FACTORIES)

FIXED_SOURCE_TYPES = frozenset({static.TYPE})
"""Sources whose read is a function of their settings and the topics asked, nothing else: with
both unchanged, a read at any later moment returns the same lags (only `taken_at` differs). A
settled policy on one is not read again until its spec changes (docs/design.md §8.3, "a parked
policy reads its lag only when its source can move it")."""


def build_lag_source(type_name: str, spec: Mapping[str, Any], context: SourceContext) -> LagSource:
    """The source for `lagSource.type`; LagSourceConfigError for an unknown type or bad spec."""
    factory = _FACTORIES.get(type_name)
    if factory is None:
        raise LagSourceConfigError(
            f"lagSource.type: unknown type {type_name!r}: choose one of {', '.join(SOURCE_TYPES)}"
        )
    return factory(spec, context)
