"""A local runner that plays the kubelet (and the scheduler) for one namespace: no node agent runs
pods on the local stack, so for every pod the operator creates this harness

1. binds it to a node name of its own (so deletion is graceful, as with a real kubelet);
2. starts a local `groupops consume` with the pod's environment (values, fieldRefs, Secret and
   ConfigMap keys resolved; the auth Secret volume materialised), plus the test's extras: a
   KUBECONFIG through a per-pod cuttable proxy and the journal directory;
3. reports the pod Running and Ready through the status subresource, with each process's start
   and the last one's end and exit code (`state`, `lastState`), as a kubelet does;
4. restarts the process when it exits on its own (restartPolicy Always; restartCount counts);
5. on deletion sends SIGTERM, SIGKILL after the grace period, then removes the pod (grace 0).

Faults a test can inject, by pod name: `crash` (SIGKILL; the harness reports the exit and
restarts it as a kubelet would), `lose_node` (SIGKILL, and the pod's status is left as it was:
the node is gone with its kubelet; `restart_now` brings it back), `freeze`/`thaw`
(SIGSTOP/SIGCONT), `cut`/`restore` (the pod's path to the API server:
it can no longer renew its Lease; Kafka stays reachable). Every fault is recorded with its
identity and time for the journal audit.

Who uses it: the e2e tests (tests/e2e/consumer_e2e.py), the failover benchmark and the demo
(devstack/demo.py). Every process it starts runs in a session of its own (a Ctrl-C in the
terminal reaches the caller, which stops them with `stop()`, never the replicas directly).
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3

from groupops.consumer.audit import Fault
from groupops.devstack.kube_api import ApiError, KubeApi
from groupops.devstack.process import free_port
from groupops.devstack.proxy import CuttableProxy, api_server_address, proxied_kubeconfig

__all__ = ["GROUPOPS", "ConsumerProcess", "Kubelet", "PodRun"]

GROUPOPS = str(Path(sys.executable).parent / "groupops")
"""The `groupops` command next to this interpreter (the venv's)."""
NODE_NAME = "groupops-harness"
AUTH_MOUNT_PATH = "/etc/groupops/kafka-auth"
CONSUMER_CONTAINER = "consumer"


def _shutdown(response: urllib3.BaseHTTPResponse) -> None:
    """End a watch's read from another thread. A watch that already ended has given its
    connection back to the pool: urllib3 then refuses (RuntimeError) rather than touch a socket
    another request may be using."""
    with contextlib.suppress(RuntimeError, ValueError, OSError):
        response.shutdown()


def _now() -> str:
    return _time(time.time())


def _time(seconds: float) -> str:
    """A kubelet's timestamp: RFC 3339 in whole seconds (metav1.Time), truncated."""
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ConsumerProcess:
    """`groupops consume` for one identity, as the kubelet would run it. `env` is the pod's
    environment; the test adds KUBECONFIG (through a cuttable proxy) and the journal directory."""

    identity: str
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        assert not self.alive(), f"{self.identity} is already running"
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"\n==== start {self.starts}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [GROUPOPS, "consume"],
                env={**os.environ, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signum)

    def pause(self) -> None:
        """SIGSTOP; returns once the kernel shows the process stopped (or after 2 s)."""
        self.signal(signal.SIGSTOP)
        assert self.process is not None
        stat = Path(f"/proc/{self.process.pid}/stat")
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                state = stat.read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                return
            if state in ("T", "t"):
                return
            time.sleep(0.001)

    def kill(self) -> None:
        """SIGKILL, as a crash; waits until the process is gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def terminate(self, grace: float = 60.0) -> int | None:
        """SIGTERM, then SIGKILL after `grace` seconds; the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class PodRun:
    name: str
    uid: str
    identity: str
    process: ConsumerProcess
    proxy: CuttableProxy
    grace_seconds: int
    restarts: int = 0
    restart_at: float | None = None
    started_at: float = 0.0
    """Wall time just before the current (or last) process started, as a runtime records it."""
    last_exit: tuple[float, float, int] | None = None
    """(started, finished, exit code) of the last process that ended, for `lastState`."""
    frozen: bool = False
    lost: bool = False
    """Its node is lost: nothing is reported or restarted until `restart_now`."""
    exited_at: float | None = None
    """When the harness first saw the current process gone (monotonic)."""
    exited_wall: float = 0.0
    """The same moment by the wall clock: the `finishedAt` it reports."""
    restart_soon: bool = False
    """`restart_now` was called: the exit is reported and the process restarted at once."""
    stopping: bool = False
    gone: bool = False


@dataclass
class Kubelet:
    """See the module docstring. `extra_env` goes into every process after the pod's own."""

    api: KubeApi
    namespace: str
    workdir: Path
    record_dir: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)
    restart_delay: float = 1.0
    exit_report_delay: float = 0.0
    """How long after a process ended its pod's status says so (a kubelet notices an exit at its
    next relist, within 1 s): the failover benchmark sets 1 s, the worst case."""
    faults: list[Fault] = field(default_factory=list)
    runs: dict[str, PodRun] = field(default_factory=dict)
    history: list[PodRun] = field(default_factory=list)
    _pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _wake: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _watch_response: urllib3.BaseHTTPResponse | None = None
    errors: list[str] = field(default_factory=list)

    def start(self) -> Kubelet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for target, name in ((self._watch, "kubelet-watch"), (self._sync_loop, "kubelet-sync")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop watching and syncing first (so that nothing starts a process any more), then every
        process gracefully: SIGTERM to all at once, SIGKILL to those still running after 30 s."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            response = self._watch_response
        if response is not None:
            _shutdown(response)  # unblocks the watch's read at once, not at its 30 s timeout
        for thread in self._threads:
            thread.join(timeout=40)
        runs = [run for run in self.history if run.process.alive()]  # also those being deleted
        for run in runs:  # all at once: each then drains in parallel with the others
            run.process.signal(signal.SIGCONT)
            run.process.signal(signal.SIGTERM)
        for run in runs:
            run.process.terminate(grace=30)
        for run in self.history:
            run.proxy.close()

    # -- faults -------------------------------------------------------------------------------------

    def run_of(self, pod: str) -> PodRun:
        with self._lock:
            run = self.runs.get(pod)
        assert run is not None, f"pod {pod} has no process (running: {sorted(self.runs)})"
        return run

    # A crash or a freeze is journaled once the process can no longer work (killed and reaped,
    # stopped): a record it processed between the call and the signal landing is then still
    # before its fault, and the audit explains its re-processing.

    def crash(self, pod: str) -> None:
        run = self.run_of(pod)
        run.process.kill()
        self._fault(run, "crash")

    def lose_node(self, pod: str) -> None:
        """The pod's node is lost: its process dies and no kubelet says so (the status stays
        Running): only the Lease's silence tells the operator."""
        run = self.run_of(pod)
        run.lost = True
        run.process.kill()
        self._fault(run, "crash")

    def freeze(self, pod: str) -> None:
        run = self.run_of(pod)
        run.frozen = True
        run.process.pause()
        self._fault(run, "freeze")

    def thaw(self, pod: str) -> None:
        run = self.run_of(pod)
        run.process.signal(signal.SIGCONT)
        run.frozen = False
        self._fault(run, "thaw")

    def cut(self, pod: str) -> None:
        run = self.run_of(pod)
        self._fault(run, "cut")
        run.proxy.cut()

    def restore(self, pod: str) -> None:
        run = self.run_of(pod)
        run.proxy.restore()
        self._fault(run, "restore")

    def stop_process(self, pod: str) -> None:
        """SIGTERM the pod's process without deleting the pod (a container stopped by its
        runtime); the harness restarts it after `restart_delay`, as after any exit."""
        run = self.run_of(pod)
        self._fault(run, "stop")
        run.process.terminate(grace=run.grace_seconds)

    def restart_now(self, pod: str) -> None:
        """Restart an exited process at once, whatever `restart_delay` says."""
        run = self.run_of(pod)
        if not run.process.alive():
            run.lost = False
            if run.restart_at is None:
                run.restart_soon = True  # not noticed yet: reported as ended, then restarted
            else:
                run.restart_at = time.monotonic()
        self._wake.set()

    def _fault(self, run: PodRun, kind: str) -> None:
        self.faults.append(Fault(run.identity, kind, time.time()))

    def pod_names(self) -> list[str]:
        with self._lock:
            return sorted(name for name, run in self.runs.items() if not run.stopping)

    # -- watching pods ------------------------------------------------------------------------------

    def _watch(self) -> None:
        resource_version: str | None = None
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    listing = self.api.request("GET", self.api.path("Pod", self.namespace))
                    with self._lock:
                        self._pods = {p["metadata"]["name"]: p for p in listing.get("items", [])}
                    resource_version = listing["metadata"]["resourceVersion"]
                    self._wake.set()
                for kind, pod in self.api.watch(
                    "Pod",
                    self.namespace,
                    resource_version=resource_version,
                    timeout_s=30,
                    on_open=self._watching,
                ):
                    resource_version = pod["metadata"].get("resourceVersion") or resource_version
                    if kind == "BOOKMARK":
                        continue
                    with self._lock:
                        if kind == "DELETED":
                            self._pods.pop(pod["metadata"]["name"], None)
                        else:
                            self._pods[pod["metadata"]["name"]] = pod
                    self._wake.set()
                    if self._stop.is_set():
                        return
            except ApiError as e:
                if self._stop.is_set():
                    return
                if e.status == 410:
                    resource_version = None
                else:
                    self.errors.append(f"watch: {e}")
                    self._stop.wait(0.5)

    def _watching(self, response: urllib3.BaseHTTPResponse) -> None:
        with self._lock:
            self._watch_response = response
        if self._stop.is_set():  # stop() came between the loop's check and this watch
            _shutdown(response)

    def _sync_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(0.2)
            self._wake.clear()
            try:
                self._sync()
            except (ApiError, OSError) as e:
                self.errors.append(f"sync: {e}")

    def _sync(self) -> None:
        with self._lock:
            pods = dict(self._pods)
            runs = dict(self.runs)
        for name, pod in pods.items():
            run = runs.get(name)
            terminating = pod["metadata"].get("deletionTimestamp") is not None
            if run is not None and run.uid != pod["metadata"]["uid"]:
                self._begin_stop(run, delete_uid=None)  # a new pod of the same name: the old one is gone
                continue
            if terminating:
                if run is not None:
                    self._begin_stop(run, delete_uid=pod["metadata"]["uid"])
                else:
                    self._delete_now(name, pod["metadata"]["uid"])
                continue
            if run is None:
                self._launch(pod)
            else:
                self._tend(run)
        for name, run in runs.items():
            if name not in pods:
                self._begin_stop(run, delete_uid=None)

    def _launch(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        if not pod["spec"].get("nodeName"):
            try:
                self.api.request(
                    "POST",
                    self.api.path("Pod", self.namespace, name) + "/binding",
                    {
                        "apiVersion": "v1",
                        "kind": "Binding",
                        "metadata": {"name": name},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME},
                    },
                )
            except ApiError as e:
                if e.status != 409:
                    raise
        env = self._environment(pod)
        host, port = api_server_address(self.api.kubeconfig)
        proxy = CuttableProxy(host, port)
        kubeconfig = proxied_kubeconfig(
            self.api.kubeconfig, proxy, self.workdir / f"{name}-{proxy.port}.kubeconfig"
        )
        env.update({"KUBECONFIG": kubeconfig, "GROUPOPS_RECORD_DIR": str(self.record_dir), **self.extra_env})
        if env.get("GROUPOPS_METRICS_PORT"):  # every "pod" shares this machine's ports and address
            env.update({"GROUPOPS_METRICS_PORT": str(free_port()), "GROUPOPS_METRICS_HOST": "127.0.0.1"})
        identity = env.get("GROUPOPS_IDENTITY", name)
        process = ConsumerProcess(identity=identity, env=env, log_path=self.workdir / f"{name}.log")
        run = PodRun(
            name=name,
            uid=pod["metadata"]["uid"],
            identity=identity,
            process=process,
            proxy=proxy,
            grace_seconds=int(pod["spec"].get("terminationGracePeriodSeconds") or 30),
        )
        with self._lock:
            self.runs[name] = run
            self.history.append(run)
        run.started_at = time.time()
        process.start()
        self._report(run, running=True)

    def _tend(self, run: PodRun) -> None:
        if run.stopping or run.frozen or run.lost or run.process.alive():
            return
        if run.restart_at is None:
            if run.exited_at is None:
                run.exited_at, run.exited_wall = time.monotonic(), time.time()
            if time.monotonic() < run.exited_at + self.exit_report_delay:
                return  # the loop comes back within 0.2 s
            run.exited_at = None
            run.restart_at = time.monotonic() + (0.0 if run.restart_soon else self.restart_delay)
            run.restart_soon = False
            returncode = run.process.process.returncode if run.process.process else None
            code = 128 - returncode if returncode is not None and returncode < 0 else (returncode or 0)
            run.last_exit = (run.started_at, run.exited_wall, code)
            self._report(run, running=False)
            return
        if time.monotonic() >= run.restart_at:
            run.restart_at = None
            run.restarts += 1
            if run.process.env.get("GROUPOPS_METRICS_PORT"):
                # Pods share this machine's ports: the one found free for the last start may have
                # been taken (by any process's outgoing connection) before the consumer bound it,
                # and a consumer that cannot bind exits. A restart gets a port free just then.
                run.process.env["GROUPOPS_METRICS_PORT"] = str(free_port())
            run.started_at = time.time()
            run.process.start()
            self._report(run, running=True)
        else:
            self._wake.set()

    def _begin_stop(self, run: PodRun, *, delete_uid: str | None) -> None:
        if run.stopping:
            return
        run.stopping = True

        def stop() -> None:
            run.frozen = False
            run.process.terminate(grace=run.grace_seconds)
            run.proxy.close()
            if delete_uid is not None:
                self._delete_now(run.name, delete_uid)
            with self._lock:
                if self.runs.get(run.name) is run:
                    del self.runs[run.name]
            run.gone = True
            self._wake.set()

        threading.Thread(target=stop, name=f"stop-{run.name}", daemon=True).start()

    def _delete_now(self, name: str, uid: str) -> None:
        try:
            self.api.request(
                "DELETE",
                self.api.path("Pod", self.namespace, name),
                {
                    "kind": "DeleteOptions",
                    "apiVersion": "v1",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": uid},
                },
            )
        except ApiError as e:
            if e.status not in (404, 409):
                raise

    # -- what the pod says --------------------------------------------------------------------------

    def _container(self, pod: dict[str, Any]) -> dict[str, Any]:
        containers = pod["spec"].get("containers") or [{}]
        return next((c for c in containers if c.get("name") == CONSUMER_CONTAINER), containers[0])

    def _environment(self, pod: dict[str, Any]) -> dict[str, str]:
        env: dict[str, str] = {}
        for item in self._container(pod).get("env") or []:
            name = item["name"]
            if "value" in item:
                env[name] = str(item["value"])
                continue
            source = item.get("valueFrom") or {}
            if "fieldRef" in source:
                env[name] = self._field(pod, source["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                secret = self.api.get("Secret", self.namespace, ref["name"]) or {}
                env[name] = base64.b64decode((secret.get("data") or {})[ref["key"]]).decode()
            elif "configMapKeyRef" in source:
                ref = source["configMapKeyRef"]
                configmap = self.api.get("ConfigMap", self.namespace, ref["name"]) or {}
                env[name] = (configmap.get("data") or {})[ref["key"]]
        auth = self._auth_directory(pod)
        if auth is not None:
            env["GROUPOPS_KAFKA_AUTH_DIR"] = auth
        return env

    def _field(self, pod: dict[str, Any], path: str) -> str:
        fields: dict[str, str] = {
            "metadata.name": pod["metadata"]["name"],
            "metadata.namespace": pod["metadata"].get("namespace", self.namespace),
            "metadata.uid": pod["metadata"]["uid"],
            "spec.nodeName": NODE_NAME,
            "status.podIP": "127.0.0.1",
        }
        return fields.get(path, "")

    def _auth_directory(self, pod: dict[str, Any]) -> str | None:
        """The Secret volume mounted at the auth path, written out as files."""
        mounts = {m["name"]: m["mountPath"] for m in self._container(pod).get("volumeMounts") or []}
        for volume in pod["spec"].get("volumes") or []:
            if mounts.get(volume["name"]) != AUTH_MOUNT_PATH or "secret" not in volume:
                continue
            secret = self.api.get("Secret", self.namespace, volume["secret"]["secretName"]) or {}
            directory = Path(tempfile.mkdtemp(prefix=f"{pod['metadata']['name']}-auth-", dir=self.workdir))
            for key, value in (secret.get("data") or {}).items():
                (directory / key).write_bytes(base64.b64decode(value))
            return str(directory)
        return None

    def _report(self, run: PodRun, *, running: bool) -> None:
        """Pod status as a kubelet writes it (no probes: ready while the process runs): the
        current process's start, and the last one's start, end and exit code (`lastState`), which
        the operator reads to know a Lease holder is gone (planner/exits.py)."""
        now = _now()
        ready = "True" if running else "False"
        state: dict[str, Any] = (
            {"running": {"startedAt": _time(run.started_at)}}
            if running
            else {"waiting": {"reason": "CrashLoopBackOff", "message": "restarting"}}
        )
        last_state: dict[str, Any] = {}
        if run.last_exit is not None:
            started, finished, code = run.last_exit
            last_state = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": _time(started),
                    "finishedAt": _time(finished),
                }
            }
        status = {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": now,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
                {"type": "Ready", "status": ready, "lastTransitionTime": now},
            ],
            "containerStatuses": [
                {
                    "name": CONSUMER_CONTAINER,
                    "ready": running,
                    "started": running,
                    "restartCount": run.restarts,
                    "image": "groupops:local",
                    "imageID": "groupops:local",
                    "containerID": f"harness://{run.process.process.pid if run.process.process else 0}",
                    "state": state,
                    "lastState": last_state,
                }
            ],
        }
        try:
            self.api.patch("Pod", self.namespace, run.name, {"status": status}, subresource="status")
        except ApiError as e:
            if e.status != 404:
                raise
