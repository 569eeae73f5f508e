"""Kubernetes Events on a policy (what `kubectl describe cgp` lists): one per rebalance and one per
condition change. Posting is best effort: a lost Event is logged, never fails a reconcile."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from groupops.controller.names import API_GROUP, API_VERSION, KIND
from groupops.controller.render_common import PolicyRef
from groupops.kubeapi import KubeClient, KubeError

__all__ = ["EventSink", "render_event"]

log = logging.getLogger(__name__)
_COMPONENT = "groupops-operator"


def render_event(policy: PolicyRef, *, kind: str, reason: str, message: str, now: datetime) -> dict[str, Any]:
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{policy.name}.", "namespace": policy.namespace},
        "involvedObject": {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "name": policy.name,
            "namespace": policy.namespace,
            "uid": policy.uid,
        },
        "type": kind,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": _COMPONENT},
        "reportingComponent": _COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventSink:
    def __init__(self, client: KubeClient) -> None:
        self._client = client

    def post(self, policy: PolicyRef, *, kind: str, reason: str, message: str, now: datetime) -> None:
        try:
            self._client.create(render_event(policy, kind=kind, reason=reason, message=message, now=now))
        except KubeError as e:
            log.warning("could not post event %s on %s/%s: %s", reason, policy.namespace, policy.name, e)
