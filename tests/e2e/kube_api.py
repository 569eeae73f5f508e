"""Moved to groupops.devstack.kube_api (the kubelet harness and the demo use it). Only a re-export
remains, for the modules outside tests/e2e that still import it from here (tests/integration,
tests/image, benchmarks); delete this file once they import from groupops.devstack.kube_api."""

from groupops.devstack.kube_api import ApiError, KubeApi

__all__ = ["ApiError", "KubeApi"]
