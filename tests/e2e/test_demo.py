"""`make demo`'s script (`python -m groupops.devstack demo`), its shorter scenario, on the session's
stack: it prints what a person looks at (the `kubectl get cgp -o wide` table, both policies Ready,
the lag before and after a rebalance, a measured failover) and leaves no process behind, whether
it runs to the end or is interrupted."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.operator_support import kubetool

pytestmark = pytest.mark.e2e

DEMO = [sys.executable, "-m", "groupops.devstack", "demo", "--short"]
TABLE_HEADER = re.compile(r"^NAME\s+STRATEGY\s+REPLICAS\s+READY\s+TOTAL LAG\s+IMBALANCE\s+EPOCH\b", re.M)
LAG_LINE = re.compile(
    r"lag before the rebalance: max member lag (?P<before>[\d,]+); after: (?P<after>[\d,]+)"
)
FAILOVER_LINE = re.compile(r"failover took (?P<seconds>\d+\.\d+) s \(kill -> the standby's first processed")


def demo_command(kube_config: str, kafka_bootstrap: str, namespace: str, logs: Path) -> list[str]:
    return [
        *DEMO,
        "--kubeconfig",
        kube_config,
        "--bootstrap-server",
        kafka_bootstrap,
        "--namespace",
        namespace,
        "--keep-logs",
        str(logs),
    ]


def processes_of(namespace: str) -> list[str]:
    """The groupops processes of the demo's namespace still running: the operator (by its
    command line) and the replicas (by GROUPOPS_NAMESPACE in their environment)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environment = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if "groupops" not in command:
            continue
        if f"--namespace {namespace}" in command or f"GROUPOPS_NAMESPACE={namespace}".encode() in environment:
            found.append(f"{entry.name}: {command.strip()}")
    return found


def test_the_demo_shows_the_plan_a_rebalance_and_a_measured_failover_then_stops_everything(
    kube_config: str, kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    kubetool("kubectl")
    namespace = unique_name("demo")
    began = time.monotonic()
    result = subprocess.run(
        demo_command(kube_config, kafka_bootstrap, namespace, tmp_path / "logs"),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    output = result.stdout + result.stderr
    print(output)
    print(f"demo --short: {time.monotonic() - began:.1f} s")
    assert result.returncode == 0, output[-3000:]

    assert len(TABLE_HEADER.findall(output)) >= 2, "kubectl get cgp -o wide, before and after the failover"
    assert re.search(r"both policies Ready after [\d.]+ s: ledger-failover, orders-lag", output)
    lag = LAG_LINE.search(output)
    assert lag is not None, "a lag-before/after line"
    assert int(lag["after"].replace(",", "")) < int(lag["before"].replace(",", ""))
    failover = FAILOVER_LINE.search(output)
    assert failover is not None, "a failover line with a measured time"
    assert 0 < float(failover["seconds"]) < 30
    assert "nothing left running" in output
    assert processes_of(namespace) == []


def test_an_interrupted_demo_stops_everything_it_started(
    kube_config: str, kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    kubetool("kubectl")
    namespace = unique_name("demo-int")
    log = tmp_path / "demo.out"
    with log.open("w") as out:
        demo = subprocess.Popen(
            demo_command(kube_config, kafka_bootstrap, namespace, tmp_path / "logs"),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 120
            while "==> waiting for both policies" not in log.read_text() and demo.poll() is None:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
            time.sleep(1.0)  # the operator and the replicas are running now
            assert processes_of(namespace), "the operator and the replicas run before the interrupt"
            os.kill(demo.pid, signal.SIGINT)  # what Ctrl-C sends
            code = demo.wait(timeout=120)
        finally:
            if demo.poll() is None:
                demo.kill()
    output = log.read_text()
    print(output)
    assert code == 130, output[-3000:]
    assert "interrupted: everything the demo started is stopped" in output
    assert processes_of(namespace) == []
