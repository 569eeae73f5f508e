"""`burrow` lag source: per-partition lag from LinkedIn Burrow's HTTP API (v3).

Spec (`lagSource.burrow`): `url` (Burrow base URL), `cluster` (Burrow's cluster name), `timeout`.
One request per read: `GET {url}/v3/kafka/{cluster}/consumer/{group}/lag`, whose
`status.partitions` lists every partition the group consumes with `current_lag`. Burrow answers
404 for a group it has not seen (it evaluates groups from their commits), which is transient.

Steps: parse -> validate (at construction) -> request on every `read`.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from groupops.lag.base import LagSnapshot, LagSourceConfigError, LagSourceUnavailable, UnknownTopicError
from groupops.lag.httpget import HTTPStatusError, get_json, join_url, log_answer

__all__ = ["BurrowLagSource", "from_spec"]

TYPE = "burrow"
DEFAULT_TIMEOUT_S = 5.0


class BurrowLagSource:
    def __init__(self, *, url: str, cluster: str, timeout: float) -> None:
        self._url = url
        self._cluster = cluster
        self._timeout = timeout

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot:
        path = (
            f"/v3/kafka/{urllib.parse.quote(self._cluster, safe='')}"
            f"/consumer/{urllib.parse.quote(group_id, safe='')}/lag"
        )
        try:
            document = get_json(join_url(self._url, path), timeout=self._timeout)
        except HTTPStatusError as e:
            if e.status == 404:
                raise LagSourceUnavailable(
                    f"Burrow does not know group {group_id!r} in cluster {self._cluster!r} yet"
                ) from e
            raise
        if not isinstance(document, Mapping) or document.get("error"):
            log_answer(self._url, "Burrow answered an error", document)
            raise LagSourceConfigError("Burrow answered an error (the operator's log has its answer)")
        found = _partitions(document.get("status"))
        lags: dict[str, tuple[int, ...]] = {}
        for topic in topics:
            per_partition = found.get(topic)
            if not per_partition:
                raise UnknownTopicError(
                    f"Burrow reports no partition of topic {topic!r} for group {group_id!r}"
                )
            lags[topic] = tuple(per_partition.get(p, 0) for p in range(max(per_partition) + 1))
        return LagSnapshot(group_id=group_id, taken_at=time.time(), lags=lags)

    def close(self) -> None:
        """Nothing to release: one request per read."""


def _partitions(status: Any) -> dict[str, dict[int, int]]:
    if not isinstance(status, Mapping):
        raise LagSourceConfigError("Burrow answer has no `status` object")
    found: dict[str, dict[int, int]] = {}
    for entry in status.get("partitions") or []:
        try:
            topic, partition, lag = (
                str(entry["topic"]),
                int(entry["partition"]),
                int(entry.get("current_lag", 0)),
            )
        except (KeyError, TypeError, ValueError) as e:
            log_answer("Burrow", "partition entry not understood", entry)
            raise LagSourceConfigError(
                "Burrow partition entry not understood (the operator's log has it)"
            ) from e
        found.setdefault(topic, {})[partition] = max(0, lag)
    return found


def from_spec(spec: Mapping[str, Any], context: object = None) -> BurrowLagSource:
    del context
    url = spec.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise LagSourceConfigError(f"lagSource.burrow.url: expected an http(s) URL, got {url!r}")
    cluster = spec.get("cluster")
    if not isinstance(cluster, str) or not cluster:
        raise LagSourceConfigError("lagSource.burrow.cluster: name the Kafka cluster as Burrow knows it")
    timeout = float(spec.get("timeoutSeconds", DEFAULT_TIMEOUT_S))
    if timeout <= 0:
        raise LagSourceConfigError("lagSource.burrow.timeoutSeconds: must be positive")
    return BurrowLagSource(url=url, cluster=cluster, timeout=timeout)
