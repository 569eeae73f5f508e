"""Plan and Lease sizes: the legacy JSON partition list against the compact form (runs per topic),
bytes and encode/decode time, and whole plan ConfigMaps at 100,000 partitions. Prints Markdown
tables for benchmarks/RESULTS.md.

    .venv/bin/python benchmarks/bench_plan_size.py [--repeat 5] [--counts 1000 10000 100000]

Sets (one identity's partitions, as in a plan entry or a Lease note), for each count N:
  contiguous    partitions 0..N-1 of one topic (what `range` gives a replica)
  every 10th    N partitions 0, 10, 20, ... of one topic (round robin over 10 replicas: no runs,
                the worst case for the compact form)
  100 topics    N partitions: every 10th of each of 100 topics
Legacy is `encode_partitions(..., legacy_limit=<no limit>)`, i.e. byte for byte what earlier
versions wrote; compact is `legacy_limit=0`. Times are the best of --repeat runs (wall clock,
time.perf_counter), decode includes the JSON parse and building the TopicPartition tuples.

Plans: 100,000 partitions over 10 identities, 10 % pending release (two epochs in flight), one
topic and 1,000 topics x 100, dealt round robin and in ranges: bytes of `data` and of the
releasing annotation in the legacy form against what `plan_to_configmap` writes now, and
`plan_configmap_problem`'s verdict on the latter.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence

from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.plan_format import RELEASING_ANNOTATION as RELEASING
from groupops.planner.plan_format import PublishedPlan, Release, plan_to_configmap
from groupops.planner.plan_size import (
    ANNOTATIONS_LIMIT_BYTES,
    CONFIGMAP_DATA_LIMIT_BYTES,
    data_size,
    plan_configmap_problem,
)
from groupops.planner.wire import decode_partitions, encode_partitions

NO_LIMIT = sys.maxsize


def shapes(count: int) -> dict[str, list[TopicPartition]]:
    per_topic = count // 100
    return {
        "contiguous": [TopicPartition("orders", p) for p in range(count)],
        "every 10th": [TopicPartition("orders", 10 * p) for p in range(count)],
        "100 topics": [
            TopicPartition(f"topic-{t:03d}", 10 * p) for t in range(100) for p in range(per_topic)
        ],
    }


def best(repeat: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def timed(partitions: list[TopicPartition], legacy: str, compact: str, repeat: int) -> list[float]:
    """Encode legacy, encode compact, decode legacy, decode compact: best seconds of each."""
    return [
        best(repeat, lambda: encode_partitions(partitions, legacy_limit=NO_LIMIT)),
        best(repeat, lambda: encode_partitions(partitions, legacy_limit=0)),
        best(repeat, lambda: decode_partitions(legacy, key="x")),
        best(repeat, lambda: decode_partitions(compact, key="x")),
    ]


def set_table(counts: Sequence[int], repeat: int) -> None:
    print(
        "| partitions | shape | legacy bytes | compact bytes | ratio | encode legacy ms | encode compact ms "
        "| decode legacy ms | decode compact ms |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for count in counts:
        for shape, partitions in shapes(count).items():
            legacy = encode_partitions(partitions, legacy_limit=NO_LIMIT)
            compact = encode_partitions(partitions, legacy_limit=0)
            assert (
                decode_partitions(legacy, key="x") == decode_partitions(compact, key="x") == tuple(partitions)
            )
            timings = timed(partitions, legacy, compact, repeat)
            print(
                f"| {count:,} | {shape} | {len(legacy):,} | {len(compact):,} "
                f"| {len(legacy) / len(compact):.1f}x | "
                + " | ".join(f"{t * 1000:.1f}" for t in timings)
                + " |"
            )


def published(partitions: list[TopicPartition], *, interleaved: bool) -> PublishedPlan:
    identities = [MemberId(f"orders-processor-{i}") for i in range(10)]
    pending = {
        tp: Release(identity=identities[k % 10], epoch=41 + k % 2, since=1_700_000_000.125 + k % 2)
        for k, tp in enumerate(partitions[::10])
    }
    owned = [tp for tp in partitions if tp not in pending]
    share = -(-len(owned) // 10)
    assignment: dict[MemberId, list[TopicPartition]] = {m: [] for m in identities}
    for j, tp in enumerate(owned):
        assignment[identities[j % 10] if interleaved else identities[j // share]].append(tp)
    plan = Plan(epoch=42, strategy="lag", assignment={m: tuple(tps) for m, tps in assignment.items()})
    return PublishedPlan(plan=plan, releasing=pending)


def legacy_parts(plan: PublishedPlan) -> tuple[int, int]:
    """Bytes of data and releasing annotation as earlier versions wrote them."""
    data = sum(len(encode_partitions(tps, legacy_limit=NO_LIMIT)) for tps in plan.plan.assignment.values())
    releasing = json.dumps(
        [
            [tp.topic, tp.partition, r.identity, r.epoch, round(r.since, 3)]
            for tp, r in sorted(plan.releasing.items())
        ],
        separators=(",", ":"),
    )
    return data + len(str(plan.plan.epoch)) + len(plan.plan.strategy), len(releasing)


def plan_table(repeat: int) -> None:
    print(
        "| 100,000 partitions, 10 identities, 10 % pending | data legacy | data now | "
        "releasing legacy | releasing now | largest Lease note now | plan_to_configmap ms | verdict now |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    cases = {
        "1 topic": [TopicPartition("orders", p) for p in range(100_000)],
        "1,000 topics x 100": [TopicPartition(f"topic-{t:04d}", p) for t in range(1000) for p in range(100)],
    }
    for name, partitions in cases.items():
        for interleaved in (True, False):
            plan = published(partitions, interleaved=interleaved)
            parts = plan_to_configmap(plan)
            old_data, old_releasing = legacy_parts(plan)
            note = max(len(encode_partitions(tps)) for tps in plan.plan.assignment.values())
            elapsed = best(repeat, lambda: plan_to_configmap(plan))  # noqa: B023
            problem = plan_configmap_problem(parts["data"], parts["annotations"])
            releasing = len(parts["annotations"][RELEASING])
            print(
                f"| {name}, {'round robin' if interleaved else 'ranges'} | {old_data:,} | "
                f"{data_size(parts['data']):,} | {old_releasing:,} | {releasing:,} | "
                f"{note:,} | {elapsed * 1000:.0f} | {'fits' if problem is None else 'refused'} |"
            )
    print(
        f"\nLimits: data {CONFIGMAP_DATA_LIMIT_BYTES:,} bytes, annotations {ANNOTATIONS_LIMIT_BYTES:,} bytes "
        "(each object; the Lease note and the releasing annotation count against it)."
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--counts", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    args = parser.parse_args()
    set_table(args.counts, args.repeat)
    print()
    plan_table(args.repeat)


if __name__ == "__main__":
    main()
