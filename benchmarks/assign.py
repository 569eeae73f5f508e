"""Assignment engine benchmarks: time and peak memory per strategy, quality on skewed lag, and the
seed's linear-scan `lag` against ours. Prints Markdown tables for benchmarks/RESULTS.md.

    python benchmarks/assign.py time      [--repeat 3] [--timeout 600] [--strategies a,b]
    python benchmarks/assign.py quality   [--seeds 3]
    python benchmarks/assign.py seed      [--partitions 100000 --members 1000]

`time`: each (case, strategy) runs in its own subprocess, so peak memory is that process's own:
ru_maxrss after the runs minus ru_maxrss once the input is built (input excluded). Time is the
best of --repeat runs of `get_strategy(name)(group)` (wall clock, time.perf_counter) and, beside
it, the CPU time of that best run (time.process_time), which a busy shared machine inflates less.
Strategies that raise NotImplementedError are skipped, and said so.

`quality`: log-normal and Zipf lag; max member lag / stats.lower_bound for a fresh assignment, and
moves in a second round where every member owns its first result and the lags are drawn anew.

`seed`: the seed's LagBasedPartitionAssignor as written (a linear scan of all consumers for every
partition, O(P x C)), implemented here only as the reference, against `lag`; checks they agree.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from groupops.assign import STRATEGY_NAMES, get_strategy
from groupops.assign.stats import compute_stats
from groupops.model import (
    Assignment,
    AssignOptions,
    GroupInput,
    Member,
    MemberId,
    TopicPartition,
    kafka_string_key,
)

# (label, partitions, members, topics, shape): shape "uniform" = everyone subscribes to every topic;
# "one-topic-member" = Kafka's large-group test variant where one member subscribes to one topic.
TIME_CASES: list[tuple[str, int, int, int, str]] = [
    ("1k x 10", 1_000, 10, 10, "uniform"),
    ("10k x 100", 10_000, 100, 10, "uniform"),
    ("100k x 10", 100_000, 10, 100, "uniform"),
    ("100k x 1,000", 100_000, 1_000, 100, "uniform"),
    ("1M x 1,000", 1_000_000, 1_000, 1_000, "uniform"),
    ("1M x 1,000, one topic", 1_000_000, 1_000, 1, "uniform"),
    ("Kafka large: 500 t x 2,000 p, 2,000 m", 1_000_000, 2_000, 500, "uniform"),
    ("Kafka large, one member on one topic", 1_000_000, 2_000, 500, "one-topic-member"),
]
QUALITY_STRATEGIES = ["range", "roundrobin", "sticky", "lag", "balanced"]


def lag_values(rng: np.random.Generator, count: int, distribution: str) -> list[int]:
    if distribution == "zipf":
        return [int(v) for v in np.minimum(rng.zipf(1.5, count), 10**9)]
    return [int(v) for v in rng.lognormal(6.0, 1.5, count)]


def make_group(
    *,
    partitions: int,
    members: int,
    topics: int,
    shape: str = "uniform",
    distribution: str = "lognormal",
    seed: int = 0,
) -> GroupInput:
    rng = np.random.default_rng(seed)
    per_topic = partitions // topics
    names = [f"topic-{t:04d}" for t in range(topics)]
    values = lag_values(rng, per_topic * topics, distribution)
    lags = {name: tuple(values[t * per_topic : (t + 1) * per_topic]) for t, name in enumerate(names)}
    everyone = frozenset(names)
    roster = tuple(
        Member(
            member_id=MemberId(f"consumer-{i:05d}"),
            topics=frozenset(names[:1]) if shape == "one-topic-member" and i == 0 else everyone,
        )
        for i in range(members)
    )
    return GroupInput(topics=dict.fromkeys(names, per_topic), members=roster, lags=lags)


def owning(
    group: GroupInput, assignment: Assignment, *, lags: Any = None, skip_first: bool = False
) -> GroupInput:
    """The group with every member owning its result (generation 1); optionally new lags."""
    members = tuple(
        Member(
            member_id=m.member_id,
            topics=m.topics,
            owned=() if skip_first and index == 0 else tuple(assignment[m.member_id]),
            generation=1,
            capacity=m.capacity,
        )
        for index, m in enumerate(group.members)
    )
    return GroupInput(
        topics=group.topics, members=members, lags=group.lags if lags is None else lags, options=group.options
    )


# --- time and memory -------------------------------------------------------------------------


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs in a subprocess: build the case, then time one strategy on it."""
    group = make_group(
        partitions=spec["partitions"], members=spec["members"], topics=spec["topics"], shape=spec["shape"]
    )
    assign = get_strategy(spec["strategy"])
    if spec["owned"]:
        group = owning(group, assign(group), skip_first=True)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    best = (float("inf"), 0.0)
    try:
        for _ in range(spec["repeat"]):
            wall, cpu = time.perf_counter(), time.process_time()
            assign(group)
            best = min(best, (time.perf_counter() - wall, time.process_time() - cpu))
    except NotImplementedError:
        return {"skipped": "NotImplementedError"}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": best[0], "cpu": best[1], "peak_mb": max(0, peak - baseline) / 1024}


def time_table(repeat: int, timeout: float, strategies: Sequence[str]) -> None:
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("\n| case | strategy | round | best wall s | its CPU s | peak MB (beyond input) |")
    print("|---|---|---|---:|---:|---:|")
    for label, partitions, members, topics, shape in TIME_CASES:
        rounds = [False, True] if label.startswith("Kafka") else [False]
        for name in strategies:
            for owned in rounds:
                spec = {
                    "partitions": partitions,
                    "members": members,
                    "topics": topics,
                    "shape": shape,
                    "strategy": name,
                    "owned": owned,
                    "repeat": repeat if partitions < 1_000_000 else max(1, repeat - 1),
                }
                round_label = "again, owned by 1..1999" if owned else "fresh"
                try:
                    done = subprocess.run(
                        [sys.executable, __file__, "_child", json.dumps(spec)],
                        capture_output=True,
                        text=True,
                        timeout=timeout,
                        check=True,
                    )
                except subprocess.TimeoutExpired:
                    print(f"| {label} | {name} | {round_label} | > {timeout:.0f} (stopped) | | |", flush=True)
                    continue
                except subprocess.CalledProcessError as e:
                    message = (
                        e.stderr.strip().splitlines()[-1] if e.stderr.strip() else f"exit {e.returncode}"
                    )
                    print(f"| {label} | {name} | {round_label} | failed: {message} | | |", flush=True)
                    continue
                result = json.loads(done.stdout)
                if "skipped" in result:
                    print(
                        f"| {label} | {name} | {round_label} | skipped: raises NotImplementedError | | |",
                        flush=True,
                    )
                    continue
                print(
                    f"| {label} | {name} | {round_label} | {result['seconds']:.4g} | {result['cpu']:.4g} "
                    f"| {result['peak_mb']:.0f} |",
                    flush=True,
                )
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


# --- quality -----------------------------------------------------------------------------------

QUALITY_CASES = [(10_000, 100, 10), (100_000, 1_000, 100), (1_000, 100, 4), (100_000, 100, 10)]


def quality_table(seeds: int, strategies: Sequence[str]) -> None:
    print("| lag | partitions x members | strategy | max lag / lower bound: mean, worst | moves, new lags |")
    print("|---|---|---|---:|---:|")
    for distribution in ("lognormal", "zipf"):
        for partitions, members, topics in QUALITY_CASES:
            for name in strategies:
                ratios: list[float] = []
                moves: list[int] = []
                try:
                    for seed in range(seeds):
                        group = make_group(
                            partitions=partitions,
                            members=members,
                            topics=topics,
                            distribution=distribution,
                            seed=seed,
                        )
                        first = get_strategy(name)(group)
                        stats = compute_stats(group, first)
                        ratios.append(stats["imbalance"])
                        redrawn = make_group(
                            partitions=partitions,
                            members=members,
                            topics=topics,
                            distribution=distribution,
                            seed=seed + 1000,
                        ).lags
                        again = owning(group, first, lags=redrawn)
                        moves.append(compute_stats(again, get_strategy(name)(again))["moves"])
                except NotImplementedError:
                    where = f"| {distribution} | {partitions:,} x {members:,} | {name} |"
                    print(f"{where} skipped: raises NotImplementedError | |")
                    continue
                print(
                    f"| {distribution} | {partitions:,} x {members:,} | {name} | "
                    f"{np.mean(ratios):.4f}, {max(ratios):.4f} | {np.mean(moves):,.0f} |",
                    flush=True,
                )


def capped_table(seeds: int) -> None:
    """`balanced` with a move cap, second round with new lags: the cap against max lag."""
    partitions, members, topics = 100_000, 1_000, 100
    print("| lag | options.max_moves | max lag / lower bound (mean) | moves (mean) |")
    print("|---|---:|---:|---:|")
    for distribution in ("lognormal", "zipf"):
        for cap in (0, 100, 1_000, 10_000, None):
            ratios, moves = [], []
            for seed in range(seeds):
                group = make_group(
                    partitions=partitions,
                    members=members,
                    topics=topics,
                    distribution=distribution,
                    seed=seed,
                )
                first = get_strategy("balanced")(group)
                redrawn = make_group(
                    partitions=partitions,
                    members=members,
                    topics=topics,
                    distribution=distribution,
                    seed=seed + 1000,
                ).lags
                again = owning(group, first, lags=redrawn)
                again = GroupInput(
                    topics=again.topics,
                    members=again.members,
                    lags=again.lags,
                    options=AssignOptions(max_moves=cap),
                )
                stats = compute_stats(again, get_strategy("balanced")(again))
                ratios.append(stats["imbalance"])
                moves.append(stats["moves"])
            shown = "none" if cap is None else f"{cap:,}"
            print(f"| {distribution} | {shown} | {np.mean(ratios):.4f} | {np.mean(moves):,.0f} |", flush=True)


# --- the seed's linear scan ------------------------------------------------------------------


def seed_linear_scan(group: GroupInput) -> Assignment:
    """LagBasedPartitionAssignor as the seed writes it: per topic, partitions by decreasing lag,
    and for each one a scan of every subscriber for (fewest partitions of this topic, least lag of
    this topic, smallest member id). One numpy pass over the subscribers per partition."""
    result: Assignment = {m.member_id: [] for m in group.members}
    by_id = sorted(group.members, key=lambda m: kafka_string_key(m.member_id))
    for topic in sorted(group.topics):
        subscribers = [m.member_id for m in by_id if topic in m.topics]
        if not subscribers:
            continue
        lags = np.asarray(group.lags.get(topic, [0] * group.topics[topic]), dtype=np.int64)
        counts = np.zeros(len(subscribers), dtype=np.int64)
        totals = np.zeros(len(subscribers), dtype=np.int64)
        for partition in np.argsort(-lags, kind="stable").tolist():
            fewest = counts == counts.min()
            chosen = int(np.flatnonzero(fewest & (totals == totals[fewest].min()))[0])
            counts[chosen] += 1
            totals[chosen] += lags[partition]
            result[subscribers[chosen]].append(TopicPartition(topic, partition))
    return {m: sorted(tps) for m, tps in result.items()}


def seed_table(partitions: int, members: int, topics: int) -> None:
    group = make_group(partitions=partitions, members=members, topics=topics)
    timings: dict[str, float] = {}
    answers: dict[str, Assignment] = {}
    runners: dict[str, Callable[[GroupInput], Assignment]] = {
        "seed linear scan (reference, in the benchmark)": seed_linear_scan,
        "groupops lag": get_strategy("lag"),
    }
    for label, run in runners.items():
        wall = time.perf_counter()
        answers[label] = run(group)
        timings[label] = time.perf_counter() - wall
    same = (
        len({json.dumps({m: [list(tp) for tp in tps] for m, tps in a.items()}) for a in answers.values()})
        == 1
    )
    print(f"load average: {os.getloadavg()[0]:.1f}; identical answers: {same}")
    print(f"\n| implementation | {partitions:,} x {members:,} ({topics} topics) wall s | per partition µs |")
    print("|---|---:|---:|")
    for label, seconds in timings.items():
        print(f"| {label} | {seconds:.2f} | {seconds / partitions * 1e6:.2f} |")


def main(argv: Sequence[str]) -> None:
    if len(argv) >= 2 and argv[0] == "_child":
        print(json.dumps(child(json.loads(argv[1]))))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["time", "quality", "capped", "seed"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--strategies", default="")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--members", type=int, default=1_000)
    parser.add_argument("--topics", type=int, default=1)
    args = parser.parse_args(argv)
    chosen = [s for s in args.strategies.split(",") if s]
    if args.what == "time":
        time_table(args.repeat, args.timeout, chosen or list(STRATEGY_NAMES))
    elif args.what == "quality":
        quality_table(args.seeds, chosen or QUALITY_STRATEGIES)
    elif args.what == "capped":
        capped_table(args.seeds)
    else:
        seed_table(args.partitions, args.members, args.topics)


if __name__ == "__main__":
    main(sys.argv[1:])
