"""What a policy's lag source may reach beyond its own spec: the Secrets its `auth` and `tls`
name, and partition counts from the policy's Kafka cluster (`SourceContext.secrets`,
`SourceContext.partition_counts`).

Who calls it: `reconcile._source_context`, which hands every lag read (and offset reset) its
`SourceContext` through `with_policy_access`. Both are callables the source calls during its
read, on the lag pool: a `kafka` or `static` policy reads no Secret and asks no count through
them.

Secrets are read as the Kafka auth Secret is (`reconcile._auth_config`): by name, in the policy's
namespace only, through the operator's reader (after the first read, the watch cache of that one
Secret: docs/design.md §8.3; a rotation shows on the next read). The chart lets the operator read
exactly the Secrets listed in its `kafkaAuthSecrets` (templates/rbac.yaml), so a lag source's
Secret is listed there as well. Errors (the lag tree, so that the reconcile reports them as it
reports the source's own):

    the operator may not read the Secret   LagSourceConfigError, naming kafkaAuthSecrets
    the API server does not answer         LagSourceUnavailable
    a value that is not base64             LagSourceConfigError (never the value)

Counts come through the operator's per-cluster readers (`KafkaClusterReaders.partition_counts`:
the shared AdminClient of the policy's connection, topic descriptions reused for 5 s, asked in
the same rounds as the `kafka` sources' reads). Without readers (tools, unit tests) the context
has no provider and the source opens a connection of its own for one request (lag/series.py).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from groupops.controller.cache import Reader
from groupops.controller.context import RunContext
from groupops.controller.lagfleet import KafkaClusterReaders
from groupops.kubeapi import Forbidden, KubeError
from groupops.lag import LagSourceConfigError, LagSourceUnavailable
from groupops.lag.kafka import settings_from_spec
from groupops.lag.registry import SourceContext

__all__ = ["PolicySecrets", "SharedPartitionCounts", "with_policy_access"]


def with_policy_access(run: RunContext, context: SourceContext) -> SourceContext:
    """`context` with the policy's Secrets and, when the operator has its per-cluster readers,
    the partition counts through them."""
    readers = run.deps.kafka_readers
    return replace(
        context,
        secrets=PolicySecrets(run.deps.reader, run.policy.namespace),
        partition_counts=None if readers is None else SharedPartitionCounts(readers, context),
    )


class PolicySecrets:
    """A `SecretReader` over the operator's reader, in one namespace."""

    def __init__(self, reader: Reader, namespace: str) -> None:
        self._reader = reader
        self._namespace = namespace

    def __repr__(self) -> str:
        return f"PolicySecrets(namespace={self._namespace!r})"

    def __call__(self, name: str) -> Mapping[str, bytes] | None:
        try:
            secret = self._reader.get("v1", "Secret", self._namespace, name)
        except Forbidden as e:
            raise LagSourceConfigError(
                f"the operator may not read Secret {name!r}: list it in the chart's kafkaAuthSecrets ({e})"
            ) from e
        except KubeError as e:
            raise LagSourceUnavailable(f"cannot read Secret {name!r}: {e}") from e
        if secret is None:
            return None
        data: Mapping[str, str] = secret.get("data") or {}
        try:
            return {key: base64.b64decode(value, validate=True) for key, value in data.items()}
        except (binascii.Error, TypeError, ValueError):
            raise LagSourceConfigError(f"Secret {name!r} holds a value that is not base64") from None


@dataclass(frozen=True, slots=True)
class SharedPartitionCounts:
    """A `PartitionCounts` through the reader of the policy's connection: the `kafka` source's
    settings of `context` (bootstrap servers, librdkafka properties, time budget)."""

    readers: KafkaClusterReaders
    context: SourceContext

    def __call__(self, topics: Sequence[str]) -> Mapping[str, int]:
        return self.readers.partition_counts(settings_from_spec({}, self.context), topics)
