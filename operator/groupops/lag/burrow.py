"""`burrow` lag source: per-partition lag from LinkedIn Burrow's HTTP API (v3).

Spec (`lagSource.burrow`): `url` (Burrow's base URL, with any prefix a proxy adds), `cluster` (the
cluster's name in Burrow's configuration), and the connection: `timeoutSeconds`, `auth`, `tls`
(lag/endpoint.py; Burrow serves neither itself, a proxy in front of it may).

One request per read, `GET {url}/v3/kafka/{cluster}/consumer/{group}/lag`, whose answers are:

- 200 `{"error": false, "status": {"partitions": [...], "maxlag": {...}, ...}}`: `partitions`
  lists every partition the group committed on, each with `topic`, `partition` and `current_lag`
  (Burrow before 1.1 gives only `end.lag`); `maxlag` is the one with the most lag, and is taken
  too when `partitions` is empty (the shape of the `/status` endpoint, which lists only
  partitions in trouble). A null entry is skipped.
- 404: Burrow knows no such group, or no such cluster (1.x answers `"status": {"status":
  "NOTFOUND"}`, older versions `{"error": true, "message": ...}`). Burrow learns of a group from
  its commits, so a new group is unknown until it commits; one more request,
  `GET {url}/v3/kafka/{cluster}`, tells the two apart: the cluster exists -> the group has no
  series yet (every partition 0, `topics_without_series`); it does not -> LagSourceConfigError
  naming `lagSource.burrow.cluster`.
- 200 with `"error": true`: LagSourceConfigError; Burrow's message goes to the operator's log
  only (lag/httpget.py).

Partition counts come from Kafka's metadata, not from Burrow (lag/series.py), as with `prometheus`.

Steps: parse -> validate -> resolve the Secrets (from_spec) -> request on every `read`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from groupops.lag.base import LagSnapshot, LagSourceConfigError
from groupops.lag.endpoint import Endpoint, endpoint_from_spec
from groupops.lag.httpget import HTTPStatusError, log_answer
from groupops.lag.series import Series, partition_counts, snapshot_from_series

if TYPE_CHECKING:
    from groupops.lag.registry import SourceContext

__all__ = ["BurrowLagSource", "from_spec"]

TYPE = "burrow"
WHERE = "lagSource.burrow"
_OWN_FIELDS = ("cluster",)


class BurrowLagSource:
    def __init__(self, *, endpoint: Endpoint, cluster: str, context: SourceContext) -> None:
        self._endpoint = endpoint
        self._cluster = cluster
        self._context = context

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot:
        cluster_path = f"/v3/kafka/{urllib.parse.quote(self._cluster, safe='')}"
        group_path = f"{cluster_path}/consumer/{urllib.parse.quote(group_id, safe='')}/lag"
        try:
            document = self._endpoint.get_json(group_path)
        except HTTPStatusError as e:
            if e.status != 404:
                raise
            self._check_cluster(cluster_path)
            series: Series = {}  # a group Burrow has not seen commit: no series yet
        else:
            if not isinstance(document, Mapping) or document.get("error"):
                log_answer(self._endpoint.url, "Burrow answered an error", document)
                raise LagSourceConfigError("Burrow answered an error (the operator's log has its answer)")
            series = _partitions(document.get("status"))
        return snapshot_from_series(group_id, topics, series, partition_counts(self._context, topics))

    def _check_cluster(self, cluster_path: str) -> None:
        try:
            self._endpoint.get_json(cluster_path)
        except HTTPStatusError as e:
            if e.status == 404:
                raise LagSourceConfigError(
                    f"{WHERE}.cluster: Burrow at {self._endpoint.url} has no cluster {self._cluster!r}"
                ) from e
            raise

    def close(self) -> None:
        """Nothing to release: one request per read."""


def _partitions(status: Any) -> Series:
    if not isinstance(status, Mapping):
        raise LagSourceConfigError("Burrow answer has no `status` object")
    entries = [entry for entry in status.get("partitions") or [] if entry is not None]
    worst = status.get("maxlag")
    if not entries and isinstance(worst, Mapping):
        entries = [worst]
    found: dict[str, dict[int, int]] = {}
    for entry in entries:
        try:
            topic, partition, lag = str(entry["topic"]), int(entry["partition"]), _lag_of(entry)
        except (KeyError, TypeError, ValueError) as e:
            log_answer("Burrow", "partition entry not understood", entry)
            raise LagSourceConfigError(
                "Burrow partition entry not understood (the operator's log has it)"
            ) from e
        per_topic = found.setdefault(topic, {})
        per_topic[partition] = max(lag, per_topic.get(partition, 0))
    return found


def _lag_of(entry: Mapping[str, Any]) -> int:
    """`current_lag`; before Burrow 1.1, the lag of the last offset evaluated (`end.lag`)."""
    if "current_lag" in entry:
        return max(0, int(entry["current_lag"]))
    end = entry.get("end")
    return max(0, int(end.get("lag", 0))) if isinstance(end, Mapping) else 0


def from_spec(spec: Mapping[str, Any], context: SourceContext) -> BurrowLagSource:
    """The registry's constructor: checks every field, reads the Secrets `auth` and `tls` name."""
    endpoint = endpoint_from_spec(spec, where=WHERE, own_fields=_OWN_FIELDS, secrets=context.secrets)
    cluster = spec.get("cluster")
    if not isinstance(cluster, str) or not cluster:
        raise LagSourceConfigError(f"{WHERE}.cluster: name the Kafka cluster as Burrow knows it")
    return BurrowLagSource(endpoint=endpoint, cluster=cluster, context=context)
