"""An operator's main process whose election is kept by its answering process, in a process of
its own, for the election tests: the test stops it with SIGSTOP, as a frozen main process, while
its answering process (a child of this one) runs on. Prints `leading <term>` once it leads and
`lost <reason>` if it is told its leadership ended, then idles until killed.

    python -m tests.integration.election_leader KUBECONFIG NAMESPACE LEASE_SECONDS PULSE_TIMEOUT_S
"""

from __future__ import annotations

import os
import sys
import threading

from groupops.controller.heartbeat_process import HeartbeatProcess
from tests.integration.election_standby import election_settings


def main() -> None:
    kubeconfig, namespace = sys.argv[1], sys.argv[2]
    lease_seconds, pulse_timeout_s = float(sys.argv[3]), float(sys.argv[4])
    os.environ["KUBECONFIG"] = kubeconfig  # the answering process's client reads it
    settings = election_settings(namespace, "operator", lease_seconds)
    answerer = HeartbeatProcess("127.0.0.1", 0)
    election = answerer.election(settings, None, pulse_timeout_s=pulse_timeout_s)
    if not election.acquire(threading.Event()):
        sys.exit("no leadership")
    print(f"leading {election.term}", flush=True)
    election.start_renewing(lambda reason: print(f"lost {reason}", flush=True))
    threading.Event().wait()


if __name__ == "__main__":
    main()
