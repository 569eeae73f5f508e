"""The `groupops assign` contract at scale: whole-command time against the engine's own time.

    python benchmarks/assign_contract.py [--repeat 3] [--shapes lag-1m,sticky-large] [--cli]
        [--kafka] [--write-results]

The command is parse (JSON text to `GroupInput`) + assign (the strategy) + stats + render
(the output JSON); the engine's own time is `get_strategy(name)(group)` alone, a library call
as the planner makes it. "ratio" = whole command / engine: the contract's aim is at most 2.

Two implementations of parse + stats + render run on the same documents, in one run:
- before: `contract.py` and `assign/stats.py` as of BEFORE_COMMIT (pydantic per partition,
  stdlib json, a dict per partition in stats), loaded from git into a scratch module, and the
  command body as it was then (json.dump of `assignment_to_json`, collector running);
- after: the working tree (msgspec into typed structs, numpy stats, output encoded directly,
  collector paused for the command).
The engine is the working tree's in both, on the same group.

Shapes: "lag-1m", 1,000 topics x 1,000 partitions, 1,000 members on every topic, log-normal
lag (mu 6, sigma 1.5), strategy `lag`; "sticky-large", Apache Kafka's large sticky test
(AbstractStickyAssignorTest: 500 topics x 2,000 partitions, 2,000 members on every topic),
second round: members 1..1999 own their fresh `sticky` result in generation 1, member 0 owns
nothing, strategy `sticky`.

Each (shape, implementation) runs in its own process, so one's garbage and heap do not weigh on
the other. Times: best of --repeat, CPU (time.process_time) and wall (time.perf_counter); on a
shared machine CPU is the better measure. --cli also times the real command for "after"
(`groupops assign --input FILE > /dev/null`, interpreter start and imports included), wall.
--kafka also times Kafka's StickyAssignor on the sticky shape through the harness of
tests/differential (a JVM; warm median of --repeat). --write-results replaces the section
SECTION of benchmarks/RESULTS.md (and nothing else).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "RESULTS.md"
SECTION = "## The assign contract at scale: whole command against the engine"
# The last commit before the contract was made proportional (msgspec, numpy stats).
BEFORE_COMMIT = "ff21351948e74f13df5ba819f3135b9c92d20203"
SHAPES = ("lag-1m", "sticky-large")
LABELS = {
    "lag-1m": "1,000 t x 1,000 p, 1,000 m, lag (lag)",
    "sticky-large": "Kafka large: 500 t x 2,000 p, 2,000 m, 2nd round (sticky)",
}


def build_document(shape: str) -> dict[str, Any]:
    from groupops.assign import get_strategy  # noqa: PLC0415
    from groupops.model import GroupInput, Member, MemberId  # noqa: PLC0415

    if shape == "lag-1m":
        rng = np.random.default_rng(1)
        names = [f"topic-{t:04d}" for t in range(1000)]
        lags = rng.lognormal(6.0, 1.5, 1_000_000).astype(np.int64).reshape(1000, 1000)
        return {
            "strategy": "lag",
            "topics": dict.fromkeys(names, 1000),
            "members": [{"member_id": f"member-{m:04d}", "topics": names} for m in range(1000)],
            "lags": {name: lags[t].tolist() for t, name in enumerate(names)},
        }
    names = [f"t{t:03d}" for t in range(500)]
    topics = dict.fromkeys(names, 2000)
    members = tuple(Member(member_id=MemberId(f"c{m:04d}"), topics=frozenset(names)) for m in range(2000))
    fresh = get_strategy("sticky")(GroupInput(topics=topics, members=members))
    entries: list[dict[str, Any]] = []
    for i, member in enumerate(members):
        entry: dict[str, Any] = {"member_id": member.member_id, "topics": names}
        if i:
            entry["owned"] = [[tp.topic, tp.partition] for tp in fresh[member.member_id]]
            entry["generation"] = 1
        entries.append(entry)
    return {"strategy": "sticky", "topics": topics, "members": entries}


def _load_before(name: str, path: str) -> ModuleType:
    """`path` as of BEFORE_COMMIT, imported as module `name` (it imports groupops as it is)."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{BEFORE_COMMIT}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: pydantic resolves annotations through it
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def _best(run: Callable[[], dict[str, float]], repeat: int) -> dict[str, float]:
    best: dict[str, float] = {}
    for _ in range(repeat):
        for key, value in run().items():
            best[key] = min(best.get(key, float("inf")), value)
    return best


def child(shape: str, implementation: str, path: Path, repeat: int) -> dict[str, float]:
    """Times of one implementation on one document, in this (fresh) process."""
    from groupops.assign import get_strategy  # noqa: PLC0415
    from groupops.assign.common import collector_paused  # noqa: PLC0415

    text = path.read_text(encoding="utf-8")
    if implementation == "before":
        contract = _load_before("contract_before", "operator/groupops/contract.py")
        stats_module = _load_before("stats_before", "operator/groupops/assign/stats.py")

        def command() -> tuple[Any, ...]:
            strategy, group = contract.parse_group_text(text)
            t1 = time.process_time(), time.perf_counter()
            assignment = get_strategy(strategy)(group)
            t2 = time.process_time(), time.perf_counter()
            stats = stats_module.compute_stats(group, assignment)
            t3 = time.process_time(), time.perf_counter()
            document = {"assignment": contract.assignment_to_json(assignment), "stats": stats}
            with open(os.devnull, "w", encoding="utf-8") as out:
                json.dump(document, out, separators=(",", ":"))
            return strategy, group, t1, t2, t3

    else:
        from groupops.assign.stats import compute_stats  # noqa: PLC0415
        from groupops.contract import parse_group_text, render_result  # noqa: PLC0415

        def command() -> tuple[Any, ...]:
            with collector_paused(0):
                strategy, group = parse_group_text(text)
                t1 = time.process_time(), time.perf_counter()
                assignment = get_strategy(strategy)(group)
                t2 = time.process_time(), time.perf_counter()
                stats = compute_stats(group, assignment)
                t3 = time.process_time(), time.perf_counter()
                with open(os.devnull, "wb") as out:
                    out.write(render_result(assignment, stats) + b"\n")
            return strategy, group, t1, t2, t3

    parsed: list[tuple[str, Any]] = []

    def run_command() -> dict[str, float]:
        parsed.clear()
        start = time.process_time(), time.perf_counter()
        strategy, group, t1, t2, t3 = command()
        end = time.process_time(), time.perf_counter()
        parsed.append((strategy, group))
        return {
            "parse_cpu": t1[0] - start[0],
            "assign_cpu": t2[0] - t1[0],
            "stats_cpu": t3[0] - t2[0],
            "render_cpu": end[0] - t3[0],
            "whole_cpu": end[0] - start[0],
            "whole_wall": end[1] - start[1],
        }

    figures = _best(run_command, repeat)
    strategy, group = parsed[0]

    def run_engine() -> dict[str, float]:
        start = time.process_time(), time.perf_counter()
        get_strategy(strategy)(group)
        return {"engine_cpu": time.process_time() - start[0], "engine_wall": time.perf_counter() - start[1]}

    figures.update(_best(run_engine, repeat))
    return figures


def cli_wall(path: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(
            [str(REPO / ".venv" / "bin" / "groupops"), "assign", "--input", str(path)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        best = min(best, time.perf_counter() - start)
    return best


def row(shape: str, implementation: str, f: dict[str, float]) -> str:
    cells = [
        shape,
        implementation,
        *(f"{f[key]:.3f}" for key in ("parse_cpu", "assign_cpu", "stats_cpu", "render_cpu", "whole_cpu")),
        f"{f['engine_cpu']:.3f}",
        f"{f['whole_cpu'] / f['engine_cpu']:.2f}",
        f"{f['whole_wall']:.3f}",
        f"{f['engine_wall']:.3f}",
        f"{f['whole_wall'] / f['engine_wall']:.2f}",
    ]
    return "| " + " | ".join(cells) + " |"


def kafka_note(path: Path, repeat: int) -> str:
    """Kafka's StickyAssignor on the same group, in process (tools/kafka-assignors, warm median)."""
    sys.path.insert(0, str(REPO))
    from tests.differential.kafka_harness import kafka_bench  # noqa: PLC0415

    from groupops.contract import parse_group_text  # noqa: PLC0415

    strategy, group = parse_group_text(path.read_text(encoding="utf-8"))
    bench = kafka_bench(strategy, [group], repeat=repeat, heap="6g")[0]
    return (
        f"Kafka's own {strategy} assignor (kafka-clients 4.3.1, `assign()` only, input built beforehand): "
        f"warm median {bench.warm_median_ms or 0:,.0f} ms wall, {bench.warm_median_cpu_ms or 0:,.0f} ms CPU "
        f"(JVM process, GC and JIT threads included); cold {bench.cold_ms:,.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--cli", action="store_true", help="also time the real command (after)")
    parser.add_argument(
        "--kafka", action="store_true", help="also time Kafka's own assignor on the sticky shape (JVM, warm)"
    )
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument(
        "--child", nargs=3, metavar=("SHAPE", "IMPLEMENTATION", "FILE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        shape, implementation, file = args.child
        print(json.dumps(child(shape, implementation, Path(file), args.repeat)))
        return

    rows: list[str] = [
        "| shape | implementation | parse CPU s | assign CPU s | stats CPU s | render CPU s | "
        "whole CPU s | engine alone CPU s | whole / engine (CPU) | whole wall s | engine wall s | "
        "whole / engine (wall) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        for shape in args.shapes.split(","):
            path = Path(scratch) / f"{shape}.json"
            path.write_text(json.dumps(build_document(shape)), encoding="utf-8")
            size = path.stat().st_size / 1e6
            for implementation in ("before", "after"):
                done = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--repeat",
                        str(args.repeat),
                        "--child",
                        shape,
                        implementation,
                        str(path),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                f = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append(row(f"{LABELS[shape]} ({size:.0f} MB)", implementation, f))
                print(rows[-1], flush=True)
            if args.kafka and shape == "sticky-large":
                notes.append(f"- {LABELS[shape]}: {kafka_note(path, args.repeat)}")
                print(notes[-1], flush=True)
            if args.cli:
                wall = cli_wall(path, args.repeat)
                notes.append(
                    f"- {LABELS[shape]}: `groupops assign --input FILE > /dev/null`, after, best of "
                    f"{args.repeat}: {wall:.2f} s wall (interpreter start and imports included)"
                )
                print(notes[-1], flush=True)
    if args.write_results:
        write_results(rows, notes, sys.argv[1:])


def write_results(rows: list[str], notes: list[str], argv: list[str]) -> None:
    load = os.getloadavg()
    command = " ".join([".venv/bin/python benchmarks/assign_contract.py", *argv])
    section = "\n".join(
        [
            SECTION,
            "",
            "`groupops assign` is parse + assign + stats + render; the engine's own time is the strategy",
            "call alone. Both implementations in one run, each in its own process, the same engine:",
            f"*before* is the contract as of {BEFORE_COMMIT[:7]} (pydantic, a Python object and a dict",
            "entry per partition, stdlib json), *after* the contract now (msgspec, numpy stats, output",
            "encoded directly, collector paused). Best of the runs; CPU is the better measure here.",
            f"Machine: {os.cpu_count()} cores shared with the team; load average at the end "
            f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min).",
            "",
            "```",
            command,
            "```",
            "",
            *rows,
            *(["", *notes] if notes else []),
            "",
        ]
    )
    text = RESULTS.read_text(encoding="utf-8")
    start = text.find(SECTION)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + ("" if end < 0 else text[end + 1 :])
    RESULTS.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
