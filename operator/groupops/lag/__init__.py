"""Lag sources: one module per source, one interface (`LagSource`), one snapshot type.

Stage: between the outside world and the planner. The operator builds a source from the policy's
`lagSource` with `build_lag_source(type, spec, ...)`; `groupops lag` and the pipeline use the same.

Errors (all `LagError`):
    LagError
    ├── LagSourceConfigError   the spec is wrong (bad URL, missing field): not retried
    ├── LagSourceUnavailable   the source cannot be reached in time: retried with backoff
    ├── UnknownTopicError      a topic of the policy does not exist
    └── LagAuthorizationError  the credentials are refused
"""

from groupops.lag.base import (
    LagAuthorizationError,
    LagError,
    LagSnapshot,
    LagSource,
    LagSourceConfigError,
    LagSourceUnavailable,
    PartitionCounts,
    PartitionOffsets,
    SecretReader,
    UnknownTopicError,
    lag_from_offsets,
)

__all__ = [
    "LagAuthorizationError",
    "LagError",
    "LagSnapshot",
    "LagSource",
    "LagSourceConfigError",
    "LagSourceUnavailable",
    "PartitionCounts",
    "PartitionOffsets",
    "SecretReader",
    "UnknownTopicError",
    "lag_from_offsets",
]
