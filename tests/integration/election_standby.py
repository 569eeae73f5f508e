"""A standby operator's campaign in a process of its own, for the election tests: the test's own
process may hold its interpreter, and a standby in it would stop with it. Prints `campaigning`,
then `leading <term>` once it wins, and exits.

    python -m tests.integration.election_standby KUBECONFIG NAMESPACE LEASE_SECONDS
"""

from __future__ import annotations

import sys
import threading

from groupops.controller.leader import LeaderElector
from groupops.controller.settings import ElectionSettings
from groupops.kubeapi import KubeClient


def election_settings(namespace: str, identity: str, lease_seconds: float) -> ElectionSettings:
    """The election tests' timing: short Leases, the operator's deadline ratio, quick retries."""
    return ElectionSettings(
        namespace=namespace,
        identity=identity,
        lease_seconds=lease_seconds,
        renew_deadline_seconds=lease_seconds * 0.7,
        retry_seconds=0.25,
    )


def main() -> None:
    kubeconfig, namespace, lease_seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    settings = election_settings(namespace, "standby", lease_seconds)
    elector = LeaderElector(KubeClient.from_environment(kubeconfig=kubeconfig), settings)
    print("campaigning", flush=True)
    if elector.acquire(threading.Event()):
        print(f"leading {elector.term}", flush=True)


if __name__ == "__main__":
    main()
