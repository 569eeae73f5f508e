"""Ours next to Apache Kafka's Java assignors, on identical inputs, in one run.

    python benchmarks/kafka_side_by_side.py [--repeat 3] [--timeout 900] [--quick]
        [--strategies range,roundrobin,sticky,cooperative-sticky] [--write-results]

For every shape and strategy the same group goes to our `get_strategy(name)` and, through the
Kafka harness (tools/kafka-assignors, kafka-clients 4.3.1), to Kafka's assignor of that name via
`ConsumerPartitionAssignor.assign(Cluster, GroupSubscription)`:
- Kafka: a fresh JVM per (shape, strategy); "cold" is the first assign() in that JVM (class
  loading and JIT included), "warm" the median of --repeat more (--small-repeat for the small
  shapes, so that the JIT has warmed up); input building is not timed.
- Ours: a forked process per (shape, strategy); "first" is the first call, "warm" the median of
  as many more (wall clock) and, beside it, the CPU time of that median run, which a busy shared
  machine inflates less; "peak MB" is the child's peak RSS minus its RSS before the first call.
- Kafka's CPU time is the JVM process's (GC and JIT threads included), ours the Python
  process's: on a machine shared with other work they are inflated less than wall time.
- "ours/Kafka warm" = our warm / Kafka's warm, wall and CPU (below 1: ours is faster).
- "same answer": "=" when ours equals Kafka's partition for partition, else "differs" (for the
  sticky pair that is information only: where Kafka's answer hangs on HashMap order the
  differential tests ask for the same balance and no more moves instead).
Shapes include Kafka's own large-group test (AbstractStickyAssignorTest): 500 topics x 2,000
partitions, 2,000 members, uniform subscriptions or member 0 on one topic only; fresh, then
again with members 1..1999 owning their previous result (Kafka's answer of the fresh round, so
both sides see the same input) in generation 1. A strategy of ours that raises
NotImplementedError, or runs past --timeout, is reported as such.

--write-results replaces the section "Ours vs Apache Kafka's Java assignors" of
benchmarks/RESULTS.md (and nothing else) with this run's table and command.
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.connection
import os
import resource
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.differential.kafka_harness import KafkaBench, KafkaHarnessError, kafka_bench  # noqa: E402

from groupops.assign import get_strategy  # noqa: E402
from groupops.model import Assignment, GroupInput, Member, MemberId  # noqa: E402

STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")
SECTION = "## Ours vs Apache Kafka's Java assignors"
RESULTS = REPO / "benchmarks" / "RESULTS.md"
KAFKA_HEAP = "6g"
KAFKA_CPU_MIN_MS = 200.0


@dataclass(frozen=True)
class Shape:
    label: str
    topics: int
    partitions_per_topic: int
    members: int
    one_topic_member: bool = False
    owned: bool = False
    large: bool = False


SHAPES = (
    Shape("10 t x 10 p, 10 m", 10, 10, 10),
    Shape("100 t x 100 p, 100 m", 100, 100, 100),
    Shape("1 t x 1,000,000 p, 1,000 m", 1, 1_000_000, 1_000, large=True),
    Shape("Kafka large: 500 t x 2,000 p, 2,000 m, fresh", 500, 2_000, 2_000, large=True),
    Shape(
        "Kafka large, members 1..1999 own their previous result", 500, 2_000, 2_000, owned=True, large=True
    ),
    Shape("Kafka large, member 0 on one topic, fresh", 500, 2_000, 2_000, one_topic_member=True, large=True),
    Shape(
        "Kafka large, member 0 on one topic, 1..1999 own previous",
        500,
        2_000,
        2_000,
        one_topic_member=True,
        owned=True,
        large=True,
    ),
)


def build(shape: Shape) -> GroupInput:
    """Kafka's test naming: zero-padded topic and consumer names, every member on every topic
    except (one_topic_member) member 0 on the first topic only."""
    topics = [f"topic{t:03d}" for t in range(shape.topics)]
    everyone = frozenset(topics)
    members = tuple(
        Member(
            member_id=MemberId(f"consumer{i:04d}"),
            topics=frozenset(topics[:1]) if shape.one_topic_member and i == 0 else everyone,
        )
        for i in range(shape.members)
    )
    return GroupInput(topics=dict.fromkeys(topics, shape.partitions_per_topic), members=members)


def owning_previous(group: GroupInput, previous: Assignment) -> GroupInput:
    """Members 1..N-1 own what they got in `previous`, in generation 1; member 0 owns nothing."""
    members = tuple(
        member if index == 0 else replace(member, owned=tuple(previous[member.member_id]), generation=1)
        for index, member in enumerate(group.members)
    )
    return replace(group, members=members)


@dataclass(frozen=True)
class Ours:
    status: str  # "ok", "not implemented", "timeout", "failed: ..."
    first_s: float = 0.0
    warm_s: float = 0.0
    warm_cpu_s: float = 0.0
    peak_mb: float = 0.0
    same: bool | None = None


def _child(
    connection: multiprocessing.connection.Connection,
    strategy: str,
    group: GroupInput,
    repeat: int,
    kafka_answer: Assignment | None,
) -> None:
    assign = get_strategy(strategy)
    base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        start = time.perf_counter()
        answer = assign(group)
        first = time.perf_counter() - start
        runs: list[tuple[float, float]] = []
        for _ in range(repeat):
            wall, cpu = time.perf_counter(), time.process_time()
            assign(group)
            runs.append((time.perf_counter() - wall, time.process_time() - cpu))
    except NotImplementedError:
        connection.send(Ours("not implemented"))
        return
    except Exception as e:
        connection.send(Ours(f"failed: {type(e).__name__}: {e}"[:80]))
        return
    runs.sort()
    warm, warm_cpu = runs[len(runs) // 2] if runs else (first, first)
    peak_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_kb) / 1024
    same = None if kafka_answer is None else answer == kafka_answer
    connection.send(Ours("ok", first, warm, warm_cpu, peak_mb, same))


def run_ours(
    strategy: str, group: GroupInput, repeat: int, timeout: float, kafka_answer: Assignment | None
) -> Ours:
    """Our strategy in a forked child (own memory peak, killable on timeout)."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(sender, strategy, group, repeat, kafka_answer))
    child.start()
    sender.close()
    try:
        if receiver.poll(timeout):
            result: Ours = receiver.recv()
            return result
        return Ours(f"timeout > {timeout:.0f} s")
    except EOFError:
        return Ours(f"failed: child exit code {child.exitcode}")
    finally:
        if child.is_alive():
            child.kill()
        child.join()


def run_kafka(strategy: str, group: GroupInput, repeat: int) -> KafkaBench | str:
    try:
        return kafka_bench(strategy, [group], repeat=repeat, emit_assignment=True, heap=KAFKA_HEAP)[0]
    except KafkaHarnessError as e:
        return f"failed: {str(e).splitlines()[0][:80]}"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}" if seconds >= 0.01 else f"{seconds * 1000:.2f}"


def row(shape: Shape, strategy: str, kafka: KafkaBench | str, ours: Ours) -> str:
    kafka_warm: tuple[float, float] | None = None
    if isinstance(kafka, str):
        kafka_cells = [kafka, "", ""]
    else:
        warm = kafka.warm_median_ms if kafka.warm_median_ms is not None else kafka.cold_ms
        warm_cpu = kafka.warm_median_cpu_ms if kafka.warm_median_cpu_ms is not None else kafka.cold_cpu_ms
        # The JVM's process CPU clock ticks in 10 ms steps: no CPU figure for shorter calls.
        cpu_seconds = warm_cpu / 1000 if warm >= KAFKA_CPU_MIN_MS else 0.0
        kafka_warm = (warm / 1000, cpu_seconds)
        kafka_cells = [ms(kafka.cold_ms / 1000), ms(kafka_warm[0]), ms(cpu_seconds) if cpu_seconds else "-"]
    if ours.status != "ok":
        ours_cells = [ours.status, "", "", "", "", "", ""]
    else:
        ratio = f"{ours.warm_s / kafka_warm[0]:.2f}" if kafka_warm and kafka_warm[0] else ""
        ratio_cpu = f"{ours.warm_cpu_s / kafka_warm[1]:.2f}" if kafka_warm and kafka_warm[1] else ""
        same = {None: "", True: "=", False: "differs"}[ours.same]
        ours_cells = [
            ms(ours.first_s),
            ms(ours.warm_s),
            ms(ours.warm_cpu_s),
            f"{ours.peak_mb:,.0f}",
            ratio,
            ratio_cpu,
            same,
        ]
    return "| " + " | ".join([shape.label, strategy, *kafka_cells, *ours_cells]) + " |"


HEADER = (
    "| shape | strategy | Kafka cold ms | Kafka warm ms | Kafka warm CPU ms | ours first ms | ours warm ms "
    "| ours warm CPU ms | ours peak MB | ours/Kafka warm | ours/Kafka warm CPU | same answer |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=3, help="warm runs per large shape")
    parser.add_argument(
        "--small-repeat", type=int, default=100, help="warm runs per small shape (JIT warm-up)"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per (shape, strategy) for ours")
    parser.add_argument("--quick", action="store_true", help="skip the large shapes")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args(argv)
    strategies = [s for s in args.strategies.split(",") if s]
    shapes = [shape for shape in SHAPES if not (args.quick and shape.large)]

    lines = [HEADER]
    print(HEADER, flush=True)
    for strategy in strategies:
        previous: dict[tuple[int, int, int, bool], Assignment] = {}
        for shape in shapes:
            key = (shape.topics, shape.partitions_per_topic, shape.members, shape.one_topic_member)
            group = build(shape)
            if shape.owned:
                if key not in previous:
                    continue
                group = owning_previous(group, previous[key])
            repeat = args.repeat if shape.large else args.small_repeat
            kafka = run_kafka(strategy, group, repeat)
            kafka_answer = None if isinstance(kafka, str) else kafka.assignment
            if kafka_answer is not None and not shape.owned:
                previous[key] = kafka_answer
            ours = run_ours(strategy, group, repeat, args.timeout, kafka_answer)
            line = row(shape, strategy, kafka, ours)
            lines.append(line)
            print(line, flush=True)

    if args.write_results:
        write_results(lines, argv if argv is not None else sys.argv[1:])
    return 0


def write_results(lines: list[str], argv: list[str]) -> None:
    load = os.getloadavg()
    command = " ".join([".venv/bin/python benchmarks/kafka_side_by_side.py", *argv])
    section = "\n".join(
        [
            SECTION,
            "",
            "Each row: the same group through our strategy and through Kafka's Java assignor of the same",
            "name (kafka-clients 4.3.1, `ConsumerPartitionAssignor.assign`, fresh JVM per row, Java 17).",
            "Kafka warm and ours warm: medians of the repeated runs; ratio < 1: ours is faster.",
            f"Machine: {os.cpu_count()} cores shared with the team; load average at the end "
            f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min): absolute times are inflated.",
            "",
            "```",
            command,
            "```",
            "",
            *lines,
            "",
        ]
    )
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\n"
    start = text.find(SECTION)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + ("" if end < 0 else text[end + 1 :])
    RESULTS.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
