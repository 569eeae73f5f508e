"""What the planner costs one reconcile of a small policy: each strategy's target and the figures
(`compute_stats`) both ways, on the shapes the operator benchmarks use.

    PYTHONPATH=operator .venv/bin/python benchmarks/planner_cost.py [--rounds 5] [--calls 300]

Per shape (partitions over topics, replicas; fresh random lag, every replica owning its share as
the published plan): the median over `--rounds` of the mean time of `--calls` calls of
- `strategy(group)` for every strategy (what `planner.target.compute_target` runs);
- `compute_stats` in plain Python (`stats._small_stats`) and in numpy (`stats._numpy_stats`),
  and which one `compute_stats` takes for that size (`stats._SMALL`, docs/design.md §3).
The two ways alternate inside each round, so a noisy machine moves both. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from groupops.assign import STRATEGY_NAMES, get_strategy, stats
from groupops.model import Assignment, GroupInput, Member, MemberId, TopicPartition

SHAPES = ((12, 1, 3), (48, 2, 6), (96, 2, 10), (200, 1, 20), (1000, 4, 20))
"""(partitions, topics, replicas): the benchmarks' policy (12 partitions, 3 replicas) and larger."""


def group_of(
    partitions: int, topics: int, replicas: int, rng: random.Random
) -> tuple[GroupInput, Assignment]:
    names = [f"t{i}" for i in range(topics)]
    per_topic = partitions // topics
    every = [TopicPartition(topic, p) for topic in names for p in range(per_topic)]
    owned = {f"replica-{i}": tuple(every[i::replicas]) for i in range(replicas)}
    members = tuple(
        Member(member_id=MemberId(name), topics=frozenset(names), owned=tps, generation=1)
        for name, tps in owned.items()
    )
    lags = {
        topic: np.array([rng.randint(0, 10**6) for _ in range(per_topic)], dtype=np.int64) for topic in names
    }
    group = GroupInput(topics=dict.fromkeys(names, per_topic), members=members, lags=lags)
    return group, {MemberId(name): sorted(tps) for name, tps in owned.items()}


def mean_us(call: Callable[[], Any], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls * 1e6


def measure(group: GroupInput, plan: Assignment, rounds: int, calls: int) -> dict[str, float]:
    """Median microseconds per call: every strategy, then the figures both ways, alternating."""
    samples: dict[str, list[float]] = {name: [] for name in (*STRATEGY_NAMES, "python", "numpy")}
    for _ in range(rounds):
        for name in STRATEGY_NAMES:
            strategy = get_strategy(name)
            samples[name].append(mean_us(lambda: strategy(group), max(1, calls // 10)))  # noqa: B023
        samples["python"].append(mean_us(lambda: stats._small_stats(group, plan), calls))
        samples["numpy"].append(mean_us(lambda: stats._numpy_stats(group, plan), calls))
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    rng = random.Random(7)
    header = ["partitions / topics / replicas", *STRATEGY_NAMES, "stats, Python", "stats, numpy", "taken"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for partitions, topics, replicas in SHAPES:
        group, plan = group_of(partitions, topics, replicas, rng)
        assert stats._small_stats(group, plan) == stats._numpy_stats(group, plan)
        medians = measure(group, plan, args.rounds, args.calls)
        taken = "Python" if stats.counted_partitions(group, plan) <= stats._SMALL else "numpy"
        cells = [f"{medians[name]:,.0f} us" for name in (*STRATEGY_NAMES, "python", "numpy")]
        print(f"| {partitions} / {topics} / {replicas} | " + " | ".join(cells) + f" | {taken} |")


if __name__ == "__main__":
    main()
