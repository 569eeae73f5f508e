"""Where one heartbeat answer's CPU goes in the answering process: the grant rule against the
socket loop around it (docs/design.md §12, benchmarks/RESULTS.md "Where an answer's time goes").

A child process holds what the operator's answering process holds (`_Answerer` with its outbox,
a Lease mirror of `--policies` x 3 replicas in heartbeat mode, every policy attached, leading)
and serves them with `HeartbeatServer`; the sender of `heartbeat_answerer.py` plays every
replica once per second from another process. Per mode, the child's user and system CPU per
heartbeat over a `--window` after a warm-up:

- `full`: the answer as the operator gives it (`HeartbeatBook.answer`);
- `constant`: one prebuilt grant for every heartbeat, the datagram still received, decoded,
  encoded and sent: the cost of everything but the grant rule and its bookkeeping.

    .venv/bin/python benchmarks/answer_floor.py [--policies 5000] [--modes full constant full constant]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

from groupops.controller.heartbeat_process import _Answerer, _Outbox
from groupops.controller.heartbeats import HeartbeatServer
from groupops.planner.liveness import HeartbeatAnswer, HeartbeatStatus
from heartbeat_answerer import NAMESPACE, REPLICAS, lease_of, policy_names, send


class _Standing:
    """An election host that never campaigns: the answerer leads by the `leading` message."""

    campaigning = False


def cpu_split(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of `pid` (fields 14 and 15 of proc(5))."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def serve(mode: str, policies: int, ports: Any) -> None:
    outbox = _Outbox()
    answerer = _Answerer(outbox, _Standing())  # type: ignore[arg-type]
    answerer.handle(("leading", time.monotonic() + 1e6, None), None)  # type: ignore[arg-type]
    for policy in policy_names(policies):
        for ordinal in range(REPLICAS):
            answerer.handle(("lease", "ADDED", lease_of(policy, ordinal)), None)  # type: ignore[arg-type]
        answerer.handle(("attach", NAMESPACE, policy), None)  # type: ignore[arg-type]
        answerer.handle(("published", NAMESPACE, policy, 3), None)  # type: ignore[arg-type]
        answerer.handle(("max_poll", NAMESPACE, policy, 300.0), None)  # type: ignore[arg-type]
    if mode == "constant":
        grant = HeartbeatAnswer(seq=1, status=HeartbeatStatus.GRANTED, valid=3.0)
        answerer.book.answer = lambda heartbeat: grant  # type: ignore[method-assign]
    server = HeartbeatServer(answerer.book, "127.0.0.1", 0, tally=outbox)
    server.start()
    ports.put(server.port)
    while True:  # the report thread's part: take what the answers gathered
        time.sleep(0.1)
        outbox.take()


def run(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    ports: multiprocessing.Queue[int] = multiprocessing.Queue()
    child = multiprocessing.Process(target=serve, args=(mode, args.policies, ports), daemon=True)
    child.start()
    port = ports.get(timeout=120)
    results: multiprocessing.Queue[dict[str, Any]] = multiprocessing.Queue()
    sender = multiprocessing.Process(
        target=send, args=(port, args.policies, 1.0, args.warmup + args.window, results)
    )
    sender.start()
    time.sleep(args.warmup)
    (user_before, system_before), at = cpu_split(child.pid or 0), time.monotonic()
    time.sleep(args.window)
    (user_after, system_after), elapsed = cpu_split(child.pid or 0), time.monotonic() - at
    outcome = results.get(timeout=args.warmup + args.window + 30)
    sender.join()
    child.kill()
    heartbeats = args.policies * REPLICAS * elapsed
    return {
        "mode": mode,
        "policies": args.policies,
        "answers": outcome["answers"],
        "user_us_per_heartbeat": round(1e6 * (user_after - user_before) / heartbeats, 1),
        "system_us_per_heartbeat": round(1e6 * (system_after - system_before) / heartbeats, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", type=int, default=5000)
    parser.add_argument("--modes", nargs="+", choices=["full", "constant"], default=["full", "constant"] * 2)
    parser.add_argument("--warmup", type=float, default=4.0)
    parser.add_argument("--window", type=float, default=14.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for mode in args.modes:
        row = run(mode, args)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
