"""Local stack start-up: how long each real component takes to be ready, how long it takes to
stop, and its resident memory once ready. Not a test; results go to benchmarks/RESULTS.md.

    .venv/bin/python benchmarks/stack_startup.py [--rounds 3] [--no-cds]

Components: one Kafka broker (KRaft combined), the three-broker rack cluster, etcd +
kube-apiserver. Each round starts each component from nothing (fresh storage, fresh certificates),
waits until it is ready by the same probes the tests use, samples RSS, and stops it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from groupops.devstack import KafkaCluster, KafkaSettings, rack_settings
from groupops.devstack.kafka import class_data_archive
from groupops.devstack.kube import KubeApiServer

MIB = 1024 * 1024


def measure(start: Callable[[Path], KafkaCluster | KubeApiServer], rounds: int) -> dict[str, object]:
    ready: list[float] = []
    stop: list[float] = []
    rss: dict[str, list[float]] = {}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="groupops-bench-") as workdir:
            began = time.monotonic()
            server = start(Path(workdir))
            ready.append(time.monotonic() - began)
            time.sleep(2)  # let the heap settle after start-up before sampling
            for name, value in server.rss().items():
                rss.setdefault(name, []).append((value or 0) / MIB)
            began = time.monotonic()
            server.stop()
            stop.append(time.monotonic() - began)
    return {"ready": ready, "stop": stop, "rss": {name: statistics.median(v) for name, v in rss.items()}}


def started(server: KafkaCluster | KubeApiServer) -> KafkaCluster | KubeApiServer:
    server.start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-cds", action="store_true", help="hide the class-data-sharing archives")
    args = parser.parse_args()
    hidden: list[tuple[Path, Path]] = []
    if args.no_cds:
        for kind in ("format", "broker"):
            archive = class_data_archive(kind)
            if archive.is_file():
                aside = archive.with_suffix(".aside")
                archive.rename(aside)
                hidden.append((aside, archive))
    try:
        cases: list[tuple[str, Callable[[Path], KafkaCluster | KubeApiServer]]] = [
            ("kafka, 1 node", lambda d: started(KafkaCluster(d, KafkaSettings()))),
            ("kafka, 3 nodes (racks)", lambda d: started(KafkaCluster(d, rack_settings()))),
            ("etcd + kube-apiserver", lambda d: started(KubeApiServer(d))),
        ]
        load = os.getloadavg()[0]
        print(f"rounds {args.rounds}, CDS {'off' if args.no_cds else 'on'}, load average at start {load:.1f}")
        print("| component | ready (median, min-max) | stop (median) | RSS per process (median) |")
        print("|---|---|---|---|")
        for name, start in cases:
            result = measure(start, args.rounds)
            ready = result["ready"]
            stop = result["stop"]
            assert isinstance(ready, list) and isinstance(stop, list)
            rss = result["rss"]
            assert isinstance(rss, dict)
            memory = ", ".join(f"{process} {value:.0f} MiB" for process, value in rss.items())
            print(
                f"| {name} | {statistics.median(ready):.1f} s ({min(ready):.1f}-{max(ready):.1f}) "
                f"| {statistics.median(stop):.1f} s | {memory} |"
            )
    finally:
        for aside, archive in hidden:
            aside.rename(archive)


if __name__ == "__main__":
    main()
