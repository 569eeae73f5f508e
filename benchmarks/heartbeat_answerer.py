"""What one consumer heartbeat costs the operator's answering process (design §7.5, §8.5).

The answering process alone (`controller.heartbeat_process.HeartbeatProcess`, spawned as the
operator spawns it), fed a Lease mirror of `--policies` × 3 replicas in heartbeat mode and told
it leads; the reconciles' side (its report receiver, the policies' `LeaseClock`s) runs in this
process. A sender in a process of its own plays every replica: one pre-encoded heartbeat per
replica per `--interval`, paced in slices of 10 ms, from a few sockets, reading every answer.
For `--window` seconds after a warm-up the CPU of the answering process (/proc, its user + system
time) and the answers the sender got are taken; the result is CPU per heartbeat and the share of
a core at that rate. No API server, broker or kubelet: this is the per-datagram path alone, which
`liveness_load.py` measures inside the whole fleet.

Compare two trees in one session by putting the other one's `operator/` first on PYTHONPATH:

    git worktree add /tmp/before <commit>
    PYTHONPATH=/tmp/before/operator .venv/bin/python benchmarks/heartbeat_answerer.py --json /tmp/hb-b.json
    .venv/bin/python benchmarks/heartbeat_answerer.py --json /tmp/hb-a.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Any

import groupops
from groupops.controller.heartbeat_process import HeartbeatProcess
from groupops.model import TopicPartition
from groupops.planner.handoff import LeaseClock
from groupops.planner.liveness import Heartbeat, decode_answer, encode_heartbeat
from groupops.planner.plan_format import LeaseRecord, LeaseState, lease_record_annotations

NAMESPACE = "bench"
REPLICAS = 3
PARTITIONS = 12
SENDER_SOCKETS = 16


def lease_of(policy: str, ordinal: int) -> dict[str, Any]:
    name = f"{policy}-{ordinal}"
    owned = tuple(TopicPartition(f"{policy}-topic", p) for p in range(ordinal, PARTITIONS, REPLICAS))
    record = LeaseRecord(
        acked_epoch=3,
        partitions=owned,
        state=LeaseState.ACTIVE,
        incarnation=f"{name}-incarnation",
        heartbeats=True,
    )
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "resourceVersion": str(1000 + ordinal),
            "labels": {"groupops.dev/policy": policy},
            "annotations": lease_record_annotations(record, name),
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 4},
    }


def policy_names(count: int) -> list[str]:
    return [f"p{i:05d}" for i in range(count)]


def send(port: int, policies: int, interval: float, seconds: float, results: Any) -> None:
    """The sender process: every replica once per `interval`, answers read as they come."""
    datagrams = [
        encode_heartbeat(
            Heartbeat(
                namespace=NAMESPACE,
                lease=f"{policy}-{ordinal}",
                incarnation=f"{policy}-{ordinal}-incarnation",
                seq=1,
                seen=3,
                progress={"poll": 0.012, "commit": 0.4},
            )
        )
        for policy in policy_names(policies)
        for ordinal in range(REPLICAS)
    ]
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(SENDER_SOCKETS)]
    for sock in sockets:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.setblocking(False)
    answers: Counter[str] = Counter()
    sent = 0
    slice_s = 0.01
    per_slice = len(datagrams) * slice_s / interval
    start = time.monotonic()
    owed = 0.0
    index = 0
    while (now := time.monotonic()) - start < seconds:
        owed += per_slice
        while owed >= 1:
            sock = sockets[index % SENDER_SOCKETS]
            try:
                sock.sendto(datagrams[index % len(datagrams)], ("127.0.0.1", port))
                sent += 1
            except BlockingIOError:
                answers["send-blocked"] += 1
            index += 1
            owed -= 1
        for sock in sockets:
            while True:
                try:
                    data = sock.recv(2048)
                except BlockingIOError:
                    break
                answers[decode_answer(data).status.value] += 1
        time.sleep(max(0.0, slice_s - (time.monotonic() - now)))
    time.sleep(0.5)
    for sock in sockets:
        while True:
            try:
                answers[decode_answer(sock.recv(2048)).status.value] += 1
            except BlockingIOError:
                break
    results.put({"sent": sent, "answers": dict(answers)})


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(args: argparse.Namespace) -> dict[str, Any]:
    answerer = HeartbeatProcess("127.0.0.1", 0)
    policies = policy_names(args.policies)
    clocks: dict[str, LeaseClock] = {}
    for policy in policies:
        for ordinal in range(REPLICAS):
            answerer.lease_event("ADDED", lease_of(policy, ordinal))
        clocks[policy] = LeaseClock()
        answerer.attach(NAMESPACE, policy, clocks[policy])
        answerer.note_published(NAMESPACE, policy, 3)
        answerer.note_max_poll_interval(NAMESPACE, policy, 300.0)
    answerer.start_leadership(lambda: time.monotonic() + 10.0, lambda: None)
    time.sleep(1.0)  # the mirror and the leadership reach the answerer
    (child,) = [process.pid for process in multiprocessing.active_children()]  # the answerer
    results: multiprocessing.Queue[dict[str, Any]] = multiprocessing.Queue()
    sender = multiprocessing.Process(
        target=send, args=(answerer.port, args.policies, args.interval, args.warmup + args.window, results)
    )
    sender.start()
    time.sleep(args.warmup)
    cpu_before, main_before, at = cpu_seconds(child), time.process_time(), time.monotonic()
    time.sleep(args.window)
    cpu_after, main_after, elapsed = cpu_seconds(child), time.process_time(), time.monotonic() - at
    outcome = results.get(timeout=args.warmup + args.window + 30)
    sender.join()
    answerer.stop()
    rate = args.policies * REPLICAS / args.interval
    answered = sum(v for k, v in outcome["answers"].items() if k != "send-blocked")
    heard_now = sum(
        1 for policy in policies for o in range(REPLICAS) if clocks[policy].heard_at(f"{policy}-{o}")
    )
    answerer_cpu = cpu_after - cpu_before
    return {
        "policies": args.policies,
        "replicas": args.policies * REPLICAS,
        "interval_s": args.interval,
        "heartbeats_per_s_asked": rate,
        "sent": outcome["sent"],
        "answers": outcome["answers"],
        "answered_share": answered / outcome["sent"] if outcome["sent"] else 0.0,
        "replicas_heard_by_the_operator_side": heard_now,
        "answerer_cpu_percent": 100 * answerer_cpu / elapsed,
        "answerer_us_per_heartbeat": 1e6 * answerer_cpu / (rate * elapsed),
        "receiver_side_cpu_percent": 100 * (main_after - main_before) / elapsed,
        "groupops": str(Path(groupops.__file__).parent),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", type=int, nargs="+", default=[1000])
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between a replica's heartbeats")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for count in args.policies:
        row = run(argparse.Namespace(**{**vars(args), "policies": count}))
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
