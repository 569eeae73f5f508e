"""Shared pieces of the operator's e2e tests: kubectl and helm (built from their Go modules by
mk/helm.mk), the CRD, a namespace per test, and the operator as a real subprocess
(`groupops operator`) against the real API server.

No node runs pods here: the tests assert what the operator creates and reports, never that a
container runs (the consumer-runtime harness plays the kubelet for that).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from groupops.controller.settings import ElectionSettings
from groupops.devstack.kube_api import KubeApi
from groupops.devstack.process import free_port as devstack_free_port
from tests.e2e.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "consumergrouppolicy.yaml"
EXAMPLES = ROOT / "examples" / "policies"
CHART = ROOT / "charts" / "groupops"
KUBETOOLS_DEFAULT = Path(os.environ.get("GROUPOPS_CACHE", Path.home() / ".cache" / "groupops")) / (
    "kubetools-helm3.18.6-k8s1.33.13-r2"
)
TICK_S = "1"
STARTUP_TIMEOUT_S = 120.0
"""An operator's start until it leads (kopf logged in): 32 s was seen in CI with the three test lanes
loading the 2-core machine; the tests' own waits time what follows, not the start."""
GROUPOPS = str(Path(sys.executable).parent / "groupops")


def kubetool(name: str) -> Path:
    """helm or kubectl from the project's build (never a binary that happens to be on PATH)."""
    directory = Path(os.environ.get("GROUPOPS_KUBETOOLS", KUBETOOLS_DEFAULT))
    path = directory / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: build it with `make kubetools` (tools/kubetools/build.sh)")
    return path


@dataclass
class Kubectl:
    kubeconfig: str

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(kubetool("kubectl")), "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def apply(
        self, manifest: dict[str, Any] | str, namespace: str, *, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
        return self.run("apply", "-n", namespace, "-f", "-", stdin=text, check=check)

    def get_json(self, kind: str, name: str | None, namespace: str, *, selector: str | None = None) -> Any:
        args = ["get", kind, "-n", namespace, "-o", "json"]
        if name:
            args.insert(2, name)
        if selector:
            args += ["-l", selector]
        result = self.run(*args, check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr:
                return None
            raise AssertionError(result.stderr)
        return json.loads(result.stdout)

    def items(self, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        document = self.get_json(kind, None, namespace, selector=selector)
        return list(document["items"]) if document else []


def free_port(kind: socket.SocketKind = socket.SOCK_STREAM) -> int:
    return devstack_free_port(kind)


_HEARTBEAT_PORTS: dict[str, tuple[int, int]] = {}
_OPERATORS_STARTED: dict[str, int] = {}


def heartbeat_ports(namespace: str) -> tuple[int, int]:
    """The UDP ports of the (at most two) operators of a test namespace, fixed up front: every
    operator renders the same consumer pods (both addresses), so a takeover rolls no pod."""
    return _HEARTBEAT_PORTS.setdefault(
        namespace, (free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_DGRAM))
    )


@dataclass
class OperatorProcess:
    """`groupops operator` as a subprocess watching one namespace; restartable and killable."""

    kubeconfig: str
    namespace: str
    log_path: Path
    extra: list[str] = field(default_factory=list)
    tick: str | None = TICK_S
    """The operator's --tick; None runs with the operator's default."""
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    heartbeats: bool = True
    """Consumers prove liveness by heartbeats to the operators (False: Lease renewals only)."""
    heartbeat_slot: int = -1

    def __post_init__(self) -> None:
        if self.heartbeat_slot < 0:  # the first operator of a namespace answers on its first port
            self.heartbeat_slot = _OPERATORS_STARTED.get(self.namespace, 0) % 2
            _OPERATORS_STARTED[self.namespace] = self.heartbeat_slot + 1

    def heartbeat_args(self) -> list[str]:
        if not self.heartbeats:
            return []
        ports = heartbeat_ports(self.namespace)
        addresses = [arg for port in ports for arg in ("--heartbeat-address", f"127.0.0.1:{port}")]
        return ["--heartbeat-port", str(ports[self.heartbeat_slot]), *addresses]

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None
        env = {**os.environ, "KUBECONFIG": self.kubeconfig}
        command = [
            GROUPOPS,
            "operator",
            "--namespace",
            self.namespace,
            *(["--tick", self.tick] if self.tick is not None else []),
            "--health-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            *self.heartbeat_args(),
            *self.extra,
        ]
        self.starts += 1
        log = self.log_path.open("ab")
        log.write(f"\n==== start {self.starts}: {' '.join(command)}\n".encode())
        log.flush()
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def wait_started(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        """Until this start's operator has logged in and begun watching (its startup line)."""
        wait_for(
            f"operator start {self.starts} to come up",
            lambda: (
                self.log_path.read_text(errors="replace").count("Initial authentication has finished")
                >= self.starts
            ),
            timeout=timeout,
            interval=0.1,
        )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def leads(self) -> bool:
        """Its current run is alive and logged that it won the leader election."""
        return self.alive() and "leading as" in self._current_run_log()

    def stands_by(self) -> bool:
        """Its current run is alive and logged that another operator leads."""
        return self.alive() and "standing by" in self._current_run_log()

    def _current_run_log(self) -> str:
        return self.log_path.read_text(errors="replace").split("==== start")[-1]

    def kill(self) -> None:
        """SIGKILL: no cleanup, as a crashed or evicted operator."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def stacks(self, settle_s: float = 1.0) -> str:
        """Every thread's stack of the running operator (`kill -USR1`, docs/operations.md "Where
        a stuck process waits"), as it wrote them to its log; empty when it is not running."""
        if not self.alive():
            return ""
        assert self.process is not None
        before = len(self.log_path.read_bytes())
        self.process.send_signal(signal.SIGUSR1)
        time.sleep(settle_s)  # the dump is written by the signal handler, from another process
        return self.log_path.read_bytes()[before:].decode(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    @property
    def metrics_port(self) -> int:
        """The --metrics-port of the current start (where /metrics is served)."""
        assert self.process is not None, "the operator was never started"
        args = [str(arg) for arg in self.process.args]
        last = len(args) - 1 - args[::-1].index("--metrics-port")  # the operator takes the last one
        return int(args[last + 1])


def election_holder(api: KubeApi, namespace: str) -> str | None:
    """Who holds the operators' election Lease in `namespace` (None: nobody)."""
    lease = api.get("Lease", namespace, ElectionSettings(namespace=namespace, identity="").name)
    return None if lease is None else (lease.get("spec") or {}).get("holderIdentity") or None


def install_crd(kubectl: Kubectl) -> None:
    """Both CRDs of crds/ (ConsumerGroupPolicy and ConsumerGroupCluster), established."""
    kubectl.run("apply", "--server-side", "--force-conflicts", "-f", str(CRD.parent))

    def established() -> bool:
        # Polled rather than `kubectl wait`, which fails outright while the new CRD has no
        # status.conditions yet (seen on a loaded machine).
        for name in ("consumergrouppolicies.groupops.dev", "consumergroupclusters.groupops.dev"):
            crd = kubectl.get_json("crd", name, "default")
            conditions = ((crd or {}).get("status") or {}).get("conditions") or []
            if not any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                return False
        return True

    wait_for("the groupops CRDs to be established", established, timeout=60, interval=0.2)


def create_namespace(kubectl: Kubectl, name: str) -> None:
    kubectl.run("create", "namespace", name)
    # The ServiceAccount admission plugin wants the namespace's default account before any pod;
    # no controller-manager runs here to create it.
    kubectl.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}, name)


def example(name: str, bootstrap: str = "127.0.0.1:9092") -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    document["spec"]["kafka"]["bootstrapServers"] = bootstrap
    return document


def cgp(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    document = kubectl.get_json("cgp", name, namespace)
    assert document is not None, f"policy {name} is gone"
    return dict(document)


def condition(policy: dict[str, Any], kind: str) -> dict[str, Any]:
    for item in (policy.get("status") or {}).get("conditions") or []:
        if item["type"] == kind:
            return dict(item)
    return {}


def settled(
    kubectl: Kubectl, namespace: str, name: str, *, min_epoch: int = 1
) -> Callable[[], dict[str, Any] | None]:
    """A probe: the policy's status describes its current generation with a plan of at least
    `min_epoch` and Ready=True (None until then)."""

    def probe() -> dict[str, Any] | None:
        policy = cgp(kubectl, namespace, name)
        status = policy.get("status") or {}
        ready = condition(policy, "Ready").get("status") == "True"
        current = status.get("observedGeneration") == policy["metadata"]["generation"]
        return policy if ready and current and int(status.get("epoch") or 0) >= min_epoch else None

    return probe


def plan_of(kubectl: Kubectl, namespace: str, policy: str) -> dict[str, str]:
    configmap = kubectl.get_json("configmap", f"{policy}-plan", namespace)
    assert configmap is not None, f"no plan ConfigMap for {policy}"
    return dict(configmap["data"])


def groupops_assign(document: dict[str, Any]) -> dict[str, Any]:
    """Run the real `groupops assign` command on a group document."""
    result = subprocess.run(
        [GROUPOPS, "assign"],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def operator_fixture(
    kube_config: str, namespace: str, tmp_path: Path, *, extra: Sequence[str] = ()
) -> Iterator[OperatorProcess]:
    operator = OperatorProcess(
        kubeconfig=kube_config, namespace=namespace, log_path=tmp_path / "operator.log", extra=list(extra)
    )
    operator.start()
    try:
        operator.wait_started(timeout=STARTUP_TIMEOUT_S)
    except BaseException:  # an operator that never came up is stopped, not left behind
        operator.stop()
        print(f"--- operator log ({namespace}) ---\n{operator.log_tail(60)}")
        raise
    try:
        yield operator
    finally:
        alive = operator.alive()
        operator.stop()
        print(f"--- operator log ({namespace}) ---\n{operator.log_tail(60)}")
        assert alive or operator.starts == 0, "the operator died during the test"
