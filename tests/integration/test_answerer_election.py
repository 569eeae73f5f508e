"""The operator's election kept by the answering process (docs/design.md §8.1), on the real API
server, against a standby in a process of its own:

- the operator's main process holding its interpreter for longer than the Lease: with the
  election in that process the standby takes over (the fault of §8.5); with the election in the
  answering process the Lease keeps being renewed and the standby never leads;
- a main process stopped with SIGSTOP (frozen: no pulse, no CPU) lets the Lease run out: the
  standby leads in the next term, and the operator is told why it lost;
- a main process that does not pulse but keeps using CPU (starved) keeps the Lease, up to the
  starved limit;
- a step-down hands the Lease over at once.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from groupops.controller.heartbeat_process import HeartbeatProcess
from groupops.controller.leader import Elector, LeaderElector
from groupops.controller.metrics import Metrics
from groupops.controller.settings import ElectionSettings
from groupops.kubeapi import KubeClient
from tests.e2e.waiting import wait_for
from tests.integration.election_standby import election_settings

pytestmark = pytest.mark.integration

LEASE_S = 2.0
PULSE_TIMEOUT_S = 6.0
"""Longer than the hold below: the main process held for 3 s is starved, not frozen."""
HOLD_S = 3
FROZEN_PULSE_TIMEOUT_S = 1.0
STARVED_PULSE_TIMEOUT_S = 1.0
STARVED_LIMIT_S = 6.0
"""Longer than the pulse timeout and the Lease together: a standby leading before it means the
starved operator was judged frozen."""
ROOT = Path(__file__).resolve().parents[2]


def settings(namespace: str) -> ElectionSettings:
    return election_settings(namespace, "operator", LEASE_S)


@dataclass
class Standby:
    """`election_standby` as a subprocess; `lines` are what it printed, with when it was read."""

    process: subprocess.Popen[str]
    lines: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line.strip()))

    def won_at(self) -> float | None:
        return next((at for at, line in self.lines if line.startswith("leading")), None)

    def end(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)
        self._reader.join(timeout=10)  # it ends at the pipe's end of file
        assert self.process.stdout is not None
        self.process.stdout.close()

    def term(self) -> int:
        return int(next(line for _, line in self.lines if line.startswith("leading")).split()[1])


@pytest.fixture
def standby(kube_config: str, namespace: str) -> Iterator[Callable[[], Standby]]:
    started: list[Standby] = []

    def start() -> Standby:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.election_standby",
                kube_config,
                namespace,
                str(LEASE_S),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(Standby(process))
        wait_for("the standby to campaign", lambda: started[-1].lines, 60, interval=0.1)
        return started[-1]

    yield start
    for candidate in started:
        candidate.end()


@pytest.fixture
def answerer(kube_config: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[HeartbeatProcess]:
    monkeypatch.setenv("KUBECONFIG", kube_config)  # the answering process's own client reads it
    process = HeartbeatProcess("127.0.0.1", 0, metrics=Metrics())
    yield process
    process.stop()


def lead(elector: Elector) -> list[str]:
    """Campaign until leading (a minute at most); the reasons `on_lost` is given, from then on."""
    stop = threading.Event()
    timer = threading.Timer(60, stop.set)
    timer.start()
    try:
        assert elector.acquire(stop), "no leadership within a minute of an uncontested campaign"
    finally:
        timer.cancel()
    lost: list[str] = []
    elector.start_renewing(lost.append)
    return lost


def hold_the_interpreter(seconds: int) -> None:
    """Keep this process's GIL for `seconds`: libc's sleep called through PyDLL, which does not
    release it. Every thread of this process stops, as under CPU starvation at its worst."""
    ctypes.PyDLL(None).sleep(seconds)


def renew_time(client: KubeClient, namespace: str) -> str:
    lease = client.get("coordination.k8s.io/v1", "Lease", namespace, "groupops-operator")
    assert lease is not None
    return str(lease["spec"]["renewTime"])


@pytest.mark.parametrize("where", ["operator process", "answering process"])
def test_a_main_process_held_longer_than_the_lease_keeps_leading_only_with_the_election_in_the_answerer(
    where: str,
    client: KubeClient,
    namespace: str,
    answerer: HeartbeatProcess,
    standby: Callable[[], Standby],
) -> None:
    elector: Elector = (
        LeaderElector(client, settings(namespace))
        if where == "operator process"
        else answerer.election(settings(namespace), None, pulse_timeout_s=PULSE_TIMEOUT_S)
    )
    lost = lead(elector)
    candidate = standby()
    term = elector.term
    before = renew_time(client, namespace)
    held_at = time.monotonic()
    hold_the_interpreter(HOLD_S)
    released_at = time.monotonic()
    assert released_at - held_at >= HOLD_S - 0.1, "the hold did not hold"
    if where == "operator process":
        # The fault: no renewal could run, the standby saw the Lease unchanged for its duration.
        wait_for("the standby to lead", candidate.won_at, 30, interval=0.05)
        assert candidate.term() == term + 1
        wait_for("the held leader to learn it lost", lambda: lost, 10, interval=0.05)
        assert not elector.still_leading()
        return
    # Renewed during the hold by the answering process: the standby saw a moving Lease.
    assert renew_time(client, namespace) > before
    time.sleep(2 * LEASE_S)
    assert candidate.won_at() is None, f"the standby took over: {candidate.lines}"
    assert elector.still_leading() and not lost and elector.term == term


def test_a_frozen_main_process_lets_the_lease_run_out_and_the_operator_is_told_why(
    kube_config: str, namespace: str, standby: Callable[[], Standby]
) -> None:
    leader = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.election_leader",
            kube_config,
            namespace,
            str(LEASE_S),
            str(FROZEN_PULSE_TIMEOUT_S),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    operator = Standby(leader)  # the same reader of printed lines
    try:
        wait_for("the operator to lead", operator.won_at, 60, interval=0.1)
        term = operator.term()
        candidate = standby()
        leader.send_signal(signal.SIGSTOP)  # the main process only: its answering process runs on
        frozen_at = time.monotonic()
        wait_for("the standby to lead", candidate.won_at, 30, interval=0.05)
        won_at = candidate.won_at()
        assert won_at is not None
        assert won_at - frozen_at >= FROZEN_PULSE_TIMEOUT_S + LEASE_S - 0.5, "taken before the Lease ran out"
        assert won_at - frozen_at < FROZEN_PULSE_TIMEOUT_S + LEASE_S + 5, "the frozen process was renewed for"
        assert candidate.term() == term + 1
        leader.send_signal(signal.SIGCONT)

        def told() -> list[str]:
            return [line for _, line in operator.lines if line.startswith("lost")]

        wait_for("the operator to be told", told, 10)
        assert "frozen" in told()[0], told()
    finally:
        leader.send_signal(signal.SIGCONT)
        operator.end()


def test_a_starved_main_process_keeps_the_lease_while_it_works_up_to_the_limit(
    client: KubeClient, namespace: str, answerer: HeartbeatProcess, standby: Callable[[], Standby]
) -> None:
    election = answerer.election(
        settings(namespace), None, pulse_timeout_s=STARVED_PULSE_TIMEOUT_S, starved_limit_s=STARVED_LIMIT_S
    )
    lost = lead(election)
    candidate = standby()
    working = threading.Event()
    working.set()
    worker = threading.Thread(target=burn_cpu_while, args=(working,), daemon=True)
    worker.start()
    try:
        election.halt()  # no more pulses, while this process keeps using CPU: starved, not frozen
        halted_at = time.monotonic()
        time.sleep(STARVED_PULSE_TIMEOUT_S + 0.5)
        renewed = renew_time(client, namespace)
        time.sleep(LEASE_S)
        assert renew_time(client, namespace) != renewed, "not renewed for a starved main process"
        assert candidate.won_at() is None, f"the standby took over a starved operator: {candidate.lines}"
        wait_for("the standby to lead", candidate.won_at, 30, interval=0.05)
    finally:
        working.clear()
        worker.join(10)
    won_at = candidate.won_at()
    assert won_at is not None
    assert won_at - halted_at >= STARVED_LIMIT_S + LEASE_S - 0.5, "taken before the starved limit"
    assert candidate.term() == election.term + 1
    wait_for("the operator to be told", lambda: lost, 10, interval=0.05)
    assert "while using CPU" in lost[0], lost
    assert not election.still_leading()


def burn_cpu_while(working: threading.Event) -> None:
    while working.is_set():
        sum(range(10_000))


def test_a_step_down_hands_over_at_once_and_the_answerers_requests_are_counted(
    namespace: str, answerer: HeartbeatProcess, standby: Callable[[], Standby]
) -> None:
    metrics = answerer.metrics
    assert metrics is not None

    def renewals() -> float:
        sample = {"verb": "update", "kind": "Lease"}
        return metrics.registry.get_sample_value("groupops_operator_api_requests_total", sample) or 0.0

    election = answerer.election(settings(namespace), None)
    lost = lead(election)
    wait_for("a renewal counted in the operator's request metric", lambda: renewals() >= 2, 10, interval=0.05)
    candidate = standby()
    released_at = time.monotonic()
    election.release()
    assert not election.still_leading()
    wait_for("the standby to lead", candidate.won_at, 30, interval=0.05)
    won_at = candidate.won_at()
    assert won_at is not None and won_at - released_at < LEASE_S, "the standby waited the Lease out"
    assert not lost, "a step-down is not a loss"
    # Then the operator stops its answering process, as a graceful shutdown does: not a loss
    # either (it once ended every rolling update with "leadership lost" and exit status 3,
    # before the history producer was flushed).
    answerer.stop()
    time.sleep(0.5)
    assert not lost, "the answering process stopping after a step-down is not a loss"
