"""What the leader election costs the API server at steady state, leader and standby apart, and
how long a standby takes to lead once the leader stops renewing (design §8.1).

On the real kube-apiserver + etcd (`groupops.devstack.kube`, cached build): two
`LeaderElector`s on clients of their own, each counting its requests by verb. The leader renews;
the standby campaigns in a thread. For `--steady` seconds nothing else happens; then the leader
halts (renewals stop, as when its process or node dies) and the time until the standby leads is
taken. `--rounds` repeats that with fresh electors on the same Lease (each takeover starts from
a leader that renewed for the whole steady window).

Compare two trees in one session by putting the other one's `operator/` first on PYTHONPATH:

    git worktree add /tmp/before <commit>
    PYTHONPATH=/tmp/before/operator .venv/bin/python benchmarks/election_requests.py --json /tmp/e-before.json
    .venv/bin/python benchmarks/election_requests.py --json /tmp/e-after.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import groupops
from groupops.controller.leader import LeaderElector
from groupops.controller.settings import ElectionSettings
from groupops.devstack.kube import KubeApiServer
from groupops.kubeapi import KubeClient


class CountingElector:
    """An elector on a client of its own that counts every request it sends, by verb."""

    def __init__(self, kubeconfig: str, namespace: str, identity: str, args: argparse.Namespace) -> None:
        self.requests: Counter[str] = Counter()
        self.client = KubeClient.from_environment(kubeconfig=kubeconfig)
        self.client.count_requests(lambda verb, _kind: self.requests.update([verb]))
        self.elector = LeaderElector(
            self.client,
            ElectionSettings.for_lease(
                namespace=namespace, name="groupops-operator", identity=identity, lease_seconds=args.lease
            )
            if args.retry is None
            else ElectionSettings(
                namespace=namespace,
                identity=identity,
                lease_seconds=args.lease,
                renew_deadline_seconds=args.lease * 0.7,
                retry_seconds=args.retry,
            ),
        )
        self.won_at: float | None = None
        self.stop = threading.Event()
        self._thread: threading.Thread | None = None

    def campaign(self) -> None:
        def run() -> None:
            if self.elector.acquire(self.stop):
                self.won_at = time.monotonic()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.stop.set()
        self.elector.halt()
        if self._thread is not None:
            self._thread.join(10)
        self.client.close()


def per_second(counts: Counter[str], seconds: float) -> dict[str, float]:
    return {verb: round(n / seconds, 3) for verb, n in sorted(counts.items())}


def one_round(kubeconfig: str, namespace: str, number: int, args: argparse.Namespace) -> dict[str, Any]:
    leader = CountingElector(kubeconfig, namespace, f"leader-{number}", args)
    standby = CountingElector(kubeconfig, namespace, f"standby-{number}", args)
    try:
        if not leader.elector.acquire(threading.Event()):
            raise RuntimeError("the leader did not take the Lease")
        leader.elector.start_renewing(lambda reason: print(f"leader lost: {reason}"))
        standby.campaign()
        time.sleep(args.settle)  # the standby's first look and its watch's list
        leader_before, standby_before = leader.requests.copy(), standby.requests.copy()
        started = time.monotonic()
        time.sleep(args.steady)
        window = time.monotonic() - started
        leader_steady = leader.requests - leader_before
        standby_steady = standby.requests - standby_before
        if standby.won_at is not None:
            raise RuntimeError("the standby took a Lease that was being renewed")
        leader.elector.halt()
        halted_at = time.monotonic()
        deadline = halted_at + 10 * args.lease
        while standby.won_at is None and time.monotonic() < deadline:
            time.sleep(0.01)
        takeover = None if standby.won_at is None else standby.won_at - halted_at
        return {
            "window_s": round(window, 2),
            "leader_per_s": per_second(leader_steady, window),
            "standby_per_s": per_second(standby_steady, window),
            "standby_watch_opened": standby_steady.get("watch", 0),
            "takeover_s": None if takeover is None else round(takeover, 3),
        }
    finally:
        leader.close()
        standby.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steady", type=float, default=30.0, help="steady window per round (s)")
    parser.add_argument("--settle", type=float, default=3.0, help="before the window (s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lease", type=float, default=5.0, help="election Lease duration (s)")
    parser.add_argument(
        "--retry",
        type=float,
        help="renew and campaign every this many seconds, as before 2026-12-01 "
        "(default: the operator's timings for --lease, ElectionSettings.for_lease)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="groupops-election-") as workdir:
        server = KubeApiServer(Path(workdir))
        server.start()
        try:
            kubeconfig = str(server.kubeconfig)
            rounds = [one_round(kubeconfig, "default", n, args) for n in range(args.rounds)]
        finally:
            server.stop()

    def besides_watch(key: str) -> float:
        """Requests a second other than WATCH, averaged over the rounds."""
        return round(statistics.mean(sum(n for v, n in r[key].items() if v != "watch") for r in rounds), 3)

    summary = {
        "groupops": str(Path(groupops.__file__).parent),
        "lease_s": args.lease,
        "retry_s": args.retry,
        "steady_s": args.steady,
        "rounds": rounds,
        "leader_requests_per_s_besides_watch": besides_watch("leader_per_s"),
        "standby_requests_per_s_besides_watch": besides_watch("standby_per_s"),
        "takeover_s": [r["takeover_s"] for r in rounds],
    }
    print(json.dumps(summary, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
