"""An operator that cannot start says why and exits, on the real API server: a port another
process holds is a startup error that names the flag, and the process ends with the runtime
failure status, so Kubernetes restarts the pod instead of keeping one that serves nothing. (It
once printed the error and stayed up: the watch caches it had started kept it alive.)"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupops.commands.errors import RUNTIME_FAILURE
from tests.e2e.operator_support import OperatorProcess, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]

EXIT_WITHIN_S = 90.0
"""Generous: the operator syncs its watch caches and spawns its answering process first."""


@pytest.fixture
def held_udp_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
        held.bind(("127.0.0.1", free_port(socket.SOCK_DGRAM)))
        yield int(held.getsockname()[1])


@pytest.mark.parametrize("answerer", ["own-process", "in-thread"])
def test_a_taken_heartbeat_port_ends_the_operator_with_an_error_naming_it(
    kube_config: str, namespace: str, tmp_path: Path, held_udp_port: int, answerer: str
) -> None:
    operator = OperatorProcess(
        kubeconfig=kube_config,
        namespace=namespace,
        log_path=tmp_path / "operator.log",
        extra=["--no-heartbeat-process"] if answerer == "in-thread" else [],
        heartbeats=False,
    )
    operator.extra += [
        "--heartbeat-port",
        str(held_udp_port),
        "--heartbeat-address",
        f"127.0.0.1:{held_udp_port}",
    ]
    code = _exit_code(operator)
    log = operator.log_path.read_text(errors="replace")
    assert code == RUNTIME_FAILURE, f"exit code {code}\n{operator.log_tail(30)}"
    assert f"cannot answer heartbeats: Address already in use (--heartbeat-port {held_udp_port})" in log, log


def test_a_taken_metrics_port_ends_the_operator_with_an_error_naming_it(
    kube_config: str, namespace: str, tmp_path: Path
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        port = int(held.getsockname()[1])
        operator = OperatorProcess(
            kubeconfig=kube_config,
            namespace=namespace,
            log_path=tmp_path / "operator.log",
            extra=["--metrics-port", str(port)],  # the last --metrics-port is the one taken
        )
        code = _exit_code(operator)
    log = operator.log_path.read_text(errors="replace")
    assert code == RUNTIME_FAILURE, f"exit code {code}\n{operator.log_tail(30)}"
    assert f"cannot serve metrics: Address already in use (--metrics-port {port})" in log, log


def _exit_code(operator: OperatorProcess) -> int | None:
    """Start the operator and wait for it to end; None (after killing it) when it did not."""
    operator.start()
    assert operator.process is not None
    try:
        return operator.process.wait(timeout=EXIT_WITHIN_S)
    except subprocess.TimeoutExpired:
        operator.kill()
        return None
