"""Moved to groupops.devstack.kubelet (the demo runs it too). Only a re-export remains, for
benchmarks/failover.py, which still imports it from here; delete this file once it imports from
groupops.devstack.kubelet."""

from groupops.devstack.kubelet import Kubelet

__all__ = ["Kubelet"]
