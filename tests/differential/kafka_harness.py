"""Apache Kafka's own assignors, from Python: a thin wrapper around tools/kafka-assignors.

The harness is a small Java program on kafka-clients (Maven Central) that reads groups in the
`groupops assign` JSON input format, one per line, and answers one JSON line per group
(tools/kafka-assignors/src/.../Main.java). This module builds it when needed (through
tools/kafka-assignors/build.sh, cached under $GROUPOPS_CACHE/kafka-assignors-<hash>/), runs a whole
batch of groups in one JVM, and maps the answers back to `groupops.model` values.

Used by tests/differential/test_matches_kafka.py and benchmarks/kafka_side_by_side.py.

Errors: `KafkaHarnessError` when the harness cannot be built or run, or answers something
unexpected; an exception of Kafka's own assignor for one group is not an error here but an answer
with `error` set.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from groupops.contract import group_to_json
from groupops.model import Assignment, GroupInput, MemberId, TopicPartition

__all__ = [
    "KafkaAnswer",
    "KafkaBench",
    "KafkaHarnessError",
    "harness_dir",
    "kafka_assign",
    "kafka_bench",
]

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "tools" / "kafka-assignors" / "build.sh"
KAFKA_STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")


class KafkaHarnessError(RuntimeError):
    """The Kafka harness could not be built or run, or answered something unexpected."""


@dataclass(frozen=True, slots=True)
class KafkaAnswer:
    """Kafka's answer for one group.

    `assignment`: every member with its partitions, sorted (None when Kafka threw: see `error`).
    `deterministic`: whether Kafka gave the same answer under every presentation of the group
    (renamed with an order-keeping prefix, members/topics/partitions shuffled); None when only
    one presentation was asked for. `target`: for cooperative-sticky, the sticky assignment
    before the partitions changing owner are taken out.
    """

    assignment: Assignment | None
    deterministic: bool | None = None
    target: Assignment | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class KafkaBench:
    """Timing of one group: the first assign() call in the JVM, and the median of the warm ones;
    wall clock, and the JVM process's CPU time in the same calls (`*_cpu_ms`)."""

    strategy: str
    cold_ms: float
    cold_cpu_ms: float
    warm_median_ms: float | None
    warm_median_cpu_ms: float | None
    warm_runs: int
    assignment: Assignment | None


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaHarnessError("no `java` on PATH and no JAVA_HOME: the Kafka harness needs Java 17+")
    return found


@functools.cache
def harness_dir() -> Path:
    """The directory holding kafka-assignors.jar, built first if its sources changed."""
    try:
        done = subprocess.run([str(BUILD_SCRIPT)], check=True, capture_output=True, text=True, timeout=1800)
    except subprocess.CalledProcessError as e:
        tail = "\n".join(e.stderr.strip().splitlines()[-15:])
        raise KafkaHarnessError(f"building the Kafka harness failed ({BUILD_SCRIPT}):\n{tail}") from e
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KafkaHarnessError(f"building the Kafka harness failed ({BUILD_SCRIPT}): {e}") from e
    directory = Path(done.stdout.strip().splitlines()[-1])
    if not (directory / "kafka-assignors.jar").is_file():
        raise KafkaHarnessError(f"{BUILD_SCRIPT} printed {directory}, which holds no kafka-assignors.jar")
    return directory


def _run(
    args: Sequence[str], lines: Iterable[str], expected: int, *, heap: str | None
) -> list[dict[str, Any]]:
    command = [java()]
    if heap:
        command.append(f"-Xmx{heap}")
    command += ["-jar", str(harness_dir() / "kafka-assignors.jar"), *args]
    stdin = "".join(line + "\n" for line in lines)
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, check=True)
    except subprocess.CalledProcessError as e:
        tail = "\n".join(e.stderr.strip().splitlines()[-15:])
        raise KafkaHarnessError(f"the Kafka harness failed with exit code {e.returncode}:\n{tail}") from e
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    if len(answers) != expected:
        raise KafkaHarnessError(f"the Kafka harness answered {len(answers)} lines for {expected} groups")
    return answers


def _assignment(raw: dict[str, list[list[Any]]]) -> Assignment:
    return {
        MemberId(member): sorted(
            TopicPartition(str(topic), int(partition)) for topic, partition in partitions
        )
        for member, partitions in raw.items()
    }


def _document(strategy: str, group: GroupInput) -> str:
    return json.dumps(group_to_json(strategy, group), separators=(",", ":"))


def kafka_assign(
    strategy: str,
    groups: Sequence[GroupInput],
    *,
    variants: int = 1,
    seed: int = 881,
    heap: str | None = None,
) -> list[KafkaAnswer]:
    """Kafka's answers for `groups` under `strategy`, all in one JVM, in order.

    `variants` > 1 also hands every group over `variants - 1` more times renamed and shuffled and
    reports whether Kafka's answer stayed the same (`KafkaAnswer.deterministic`).
    """
    if strategy not in KAFKA_STRATEGIES:
        raise KafkaHarnessError(
            f"Kafka has no assignor for {strategy!r}: one of {', '.join(KAFKA_STRATEGIES)}"
        )
    args = ["--variants", str(variants), "--seed", str(seed)]
    raw = _run(args, (_document(strategy, group) for group in groups), len(groups), heap=heap)
    answers: list[KafkaAnswer] = []
    for answer in raw:
        if "error" in answer:
            answers.append(KafkaAnswer(assignment=None, error=str(answer["error"])))
            continue
        target = answer.get("target")
        answers.append(
            KafkaAnswer(
                assignment=_assignment(answer["assignment"]),
                deterministic=answer.get("deterministic"),
                target=None if target is None else _assignment(target),
            )
        )
    return answers


def kafka_bench(
    strategy: str,
    groups: Sequence[GroupInput],
    *,
    repeat: int = 5,
    emit_assignment: bool = False,
    heap: str | None = None,
) -> list[KafkaBench]:
    """Time Kafka's `strategy` on each group in one fresh JVM: cold first call and warm median."""
    args = ["--bench", "--repeat", str(repeat)]
    if emit_assignment:
        args.append("--emit-assignment")
    raw = _run(args, (_document(strategy, group) for group in groups), len(groups), heap=heap)
    return [
        KafkaBench(
            strategy=str(answer["strategy"]),
            cold_ms=float(answer["cold_ms"]),
            cold_cpu_ms=float(answer["cold_cpu_ms"]),
            warm_median_ms=None if "warm_median_ms" not in answer else float(answer["warm_median_ms"]),
            warm_median_cpu_ms=None
            if "warm_median_cpu_ms" not in answer
            else float(answer["warm_median_cpu_ms"]),
            warm_runs=int(answer["warm_runs"]),
            assignment=_assignment(answer["assignment"]) if "assignment" in answer else None,
        )
        for answer in raw
    ]
