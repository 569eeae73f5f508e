"""`make test`: every test, in three lanes run at once, so that the suite's idle waits overlap
while the timed tests keep the CPU they need (docs/design.md §11, "make test runs three lanes at once").

    timed    e2e and integration tests: they time real processes (failover bounds, Lease expiry,
             heartbeats, a lag source's deadline). Normal priority.
    shared   unit, chart, differential and image tests, and the e2e and integration modules marked
             `no_time_bound` (they wait for an outcome with a generous timeout and time nothing).
             Niced (10), so the timed lane's processes come first.
    spark    the pipeline tests (a local session, a standalone cluster, a Connect server): they use
             both cores when they can, so they run at idle priority (SCHED_IDLE): whatever the other
             two lanes leave, and never before a timed process that wants to run.

A priority reaches only the processes that stay in the lane's session: with the kernel's
autogroups a new session is a scheduling group of its own, at full weight. Spark's daemons stay in
the spark lane's session (`ManagedProcess(own_session=False)`), so the whole Spark lane is idle; the
stack's servers and the replicas keep sessions of their own and their full weight in any lane (a
niced API server cost the shared lane's operator its election).

As a pytest plugin (tests/conftest.py) this module adds `--lane=timed|shared|spark`, which keeps
only that lane's tests; without it pytest runs every test in one process, as before. Run as
`python -m tests.lanes [pytest arguments]`, it runs the three lanes (the arguments go to each),
prints the timed lane as it goes and the others' output when the timed lane is done, keeps each
lane's output in test-output/lanes/<lane>.log, and exits with the first failing lane's status.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from groupops.devstack.process import PORT_BAND_VARIABLE

Lane = Literal["timed", "shared", "spark"]
LANES: tuple[Lane, ...] = ("timed", "shared", "spark")
SHARED_NICENESS = 10
_TIMED_DIRECTORIES = frozenset({"e2e", "integration"})


def lane_of(item: pytest.Item) -> Lane:
    """The lane a test belongs to, from its directory under tests/ and its `no_time_bound` mark."""
    directory = item.path.relative_to(item.config.rootpath / "tests").parts[0]
    if directory == "pipeline":
        return "spark"
    if directory in _TIMED_DIRECTORIES and item.get_closest_marker("no_time_bound") is None:
        return "timed"
    return "shared"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lane",
        choices=LANES,
        default=None,
        help="run only this lane's tests (tests/lanes.py); default: every test",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "no_time_bound: an e2e or integration module that times nothing and waits generously, "
        "so `make test` runs it niced beside the timed lane (tests/lanes.py)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lane = config.getoption("--lane")
    if lane is None:
        return
    kept = [item for item in items if lane_of(item) == lane]
    dropped = [item for item in items if lane_of(item) != lane]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept


@dataclass
class LaneRun:
    lane: Lane
    process: subprocess.Popen[bytes]
    log: Path
    live: bool
    started: float
    ended: float | None = None

    def __post_init__(self) -> None:
        if not self.live:  # its end is noted when it comes, not when `finish` is called
            threading.Thread(target=self._note_end, name=f"lane-{self.lane}", daemon=True).start()

    def _note_end(self) -> None:
        self.process.wait()
        self.ended = time.monotonic()

    def finish(self) -> int:
        """Wait for the lane; a live lane's output is copied to our stdout and its log meanwhile."""
        if self.live:
            _relay(self.process, self.log)
        code = self.process.wait()
        if self.ended is None:
            self.ended = time.monotonic()
        return code

    @property
    def seconds(self) -> float:
        return (self.ended or time.monotonic()) - self.started


def lane_environment(lane: Lane) -> dict[str, str]:
    """The lane's environment: ours, and a band of ports of its own for the servers its tests
    start (`devstack.process.free_port`): lanes draw ports at the same time, and a port one lane
    drew but has not bound yet must not be another lane's draw."""
    return {**os.environ, PORT_BAND_VARIABLE: f"{LANES.index(lane)}/{len(LANES)}"}


def start_lane(lane: Lane, pytest_args: list[str], log: Path, *, live: bool) -> LaneRun:
    """One pytest process for `lane`, its output in `log` (a live lane's through `finish`)."""
    command = [sys.executable, "-m", "pytest", f"--lane={lane}", *pytest_args]
    if lane == "shared":
        command = ["nice", "-n", str(SHARED_NICENESS), *command]
    elif lane == "spark":
        command = ["chrt", "--idle", "0", *command]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE if live else sink,
            stderr=subprocess.STDOUT,
            env=lane_environment(lane),
        )
    return LaneRun(lane=lane, process=process, log=log, live=live, started=time.monotonic())


def _relay(process: subprocess.Popen[bytes], log: Path) -> None:
    """pytest writes its progress dots without newlines, so this copies whatever is there, not
    lines."""
    assert process.stdout is not None
    out = sys.stdout.buffer
    with log.open("wb") as sink:
        while chunk := os.read(process.stdout.fileno(), 65536):
            out.write(chunk)
            out.flush()
            sink.write(chunk)


def main(argv: list[str]) -> int:
    logs = Path("test-output") / "lanes"
    print(
        f"== the timed lane, with the shared lane (niced {SHARED_NICENESS}) and the spark lane "
        f"(idle priority) beside it (logs in {logs}/)",
        flush=True,
    )
    shared = start_lane("shared", argv, logs / "shared.log", live=False)
    spark = start_lane("spark", argv, logs / "spark.log", live=False)
    timed = start_lane("timed", argv, logs / "timed.log", live=True)
    codes = {timed.lane: timed.finish()}
    for run, how in ((shared, f"niced {SHARED_NICENESS}"), (spark, "idle priority")):
        print(f"\n== the {run.lane} lane (ran beside the timed lane, {how})", flush=True)
        codes[run.lane] = run.finish()
        sys.stdout.buffer.write(run.log.read_bytes())
    print("\n== lanes", flush=True)
    for run in (timed, shared, spark):
        outcome = "passed" if codes[run.lane] == 0 else f"FAILED (exit {codes[run.lane]})"
        print(f"   {run.lane:<7} {outcome:<18} {run.seconds:7.0f} s", flush=True)
    return next((codes[lane] for lane in LANES if codes[lane] != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
