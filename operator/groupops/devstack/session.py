"""A developer's long-running stack: `up` starts one Kafka broker and the API server detached,
writes `<state dir>/env` and `<state dir>/state.json`; `down` stops exactly what `up` started.

Who calls it: `make dev-up` / `make dev-down` through `python -m groupops.devstack`.

`<state dir>/env` is for the shell (`source .dev/env`):

    export KUBECONFIG=/abs/path/.dev/kube/kubeconfig
    export KAFKA_BOOTSTRAP=127.0.0.1:40231

and the test fixtures use a running stack when those two variables are set.
"""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from groupops.devstack.errors import StateError
from groupops.devstack.kafka import KafkaCluster, KafkaSettings
from groupops.devstack.kube import KubeApiServer
from groupops.devstack.process import is_ours, rss_bytes, signal_pids, stop_pids

__all__ = ["ComponentState", "StackState", "down", "status", "up"]

_STATE = "state.json"
_ENV = "env"


@dataclass(frozen=True, slots=True, kw_only=True)
class ComponentState:
    """One started component: its processes, logs, address and how long it took to be ready."""

    name: str
    address: str
    pids: list[int]
    logs: list[str]
    ready_seconds: float
    process_names: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class StackState:
    state_dir: str
    components: list[ComponentState] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    up_seconds: float = 0.0

    def pids(self) -> list[int]:
        return [pid for component in self.components for pid in component.pids]


def up(state_dir: Path, *, kafka: bool = True, kube: bool = True, brokers: int = 1) -> StackState:
    """Start the stack detached (replacing a previous one in `state_dir`) and record it. Kafka
    and the API server start side by side: each mostly waits on its own JVM or Go process."""
    state_dir = state_dir.resolve()
    began = time.monotonic()
    if (state_dir / _STATE).exists():
        down(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    cluster = KafkaCluster(state_dir / "kafka", KafkaSettings(brokers=brokers)) if kafka else None
    apiserver = KubeApiServer(state_dir / "kube") if kube else None
    servers: list[KafkaCluster | KubeApiServer] = [s for s in (cluster, apiserver) if s is not None]
    for server in servers:
        shutil.rmtree(server.workdir, ignore_errors=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        started = [pool.submit(server.start) for server in servers]
        failures = [error for future in started if (error := future.exception()) is not None]
    if failures:
        for server in servers:
            server.stop()
        raise failures[0]
    components: list[ComponentState] = []
    env: dict[str, str] = {}
    if cluster is not None:
        env["KAFKA_BOOTSTRAP"] = cluster.bootstrap
        components.append(_component("kafka", cluster.bootstrap, cluster, cluster.start_seconds))
    if apiserver is not None:
        env["KUBECONFIG"] = str(apiserver.kubeconfig)
        components.append(
            _component("kube-apiserver", apiserver.server_url, apiserver, apiserver.start_seconds)
        )
    state = StackState(
        state_dir=str(state_dir), components=components, env=env, up_seconds=time.monotonic() - began
    )
    (state_dir / _STATE).write_text(json.dumps(asdict(state), indent=2) + "\n")
    (state_dir / _ENV).write_text("".join(f"export {key}={value}\n" for key, value in sorted(env.items())))
    return state


def _component(
    name: str, address: str, server: KafkaCluster | KubeApiServer, seconds: float | None
) -> ComponentState:
    processes = server.processes()
    return ComponentState(
        name=name,
        address=address,
        pids=[process.pid for process in processes],
        process_names=[process.name for process in processes],
        logs=[str(path) for path in server.log_paths],
        ready_seconds=seconds or 0.0,
    )


def load(state_dir: Path) -> StackState:
    path = state_dir.resolve() / _STATE
    try:
        raw = json.loads(path.read_text())
        return StackState(
            state_dir=raw["state_dir"],
            components=[ComponentState(**component) for component in raw["components"]],
            env=dict(raw["env"]),
            up_seconds=float(raw.get("up_seconds", 0.0)),
        )
    except FileNotFoundError as e:
        raise StateError(
            f"no stack recorded in {state_dir} (nothing to stop: run `make dev-up` first)"
        ) from e
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StateError(f"unreadable stack state {path}: {e}") from e


def down(state_dir: Path) -> list[int]:
    """Stop what `up` recorded in `state_dir` and forget it; returns the pids stopped. Kafka gets
    SIGTERM first and shuts down while the API server and then etcd stop (in that order: the
    API server would log etcd errors while it drains). A missing state is a StateError."""
    state = load(state_dir)
    marker = state.state_dir
    by_name = {component.name: component for component in state.components}
    kafka = by_name.get("kafka")
    kube = by_name.get("kube-apiserver")
    stopped: list[int] = []
    signalled = signal_pids(kafka.pids, marker) if kafka is not None else []
    if kube is not None:
        for pid in reversed(kube.pids):  # recorded as [etcd, kube-apiserver]
            stopped += stop_pids([pid], marker)
    stop_pids(signalled, marker)  # waits, and SIGKILLs a broker that hangs
    stopped += signalled
    (Path(marker) / _STATE).unlink(missing_ok=True)
    (Path(marker) / _ENV).unlink(missing_ok=True)
    return stopped


def status(state_dir: Path) -> list[tuple[ComponentState, list[tuple[str, int, bool, int | None]]]]:
    """Each recorded component with, per process: name, pid, alive (and ours), resident memory
    in bytes."""
    state = load(state_dir)
    return [
        (
            component,
            [
                (name, pid, is_ours(pid, state.state_dir), rss_bytes(pid))
                for name, pid in zip(
                    component.process_names or [component.name] * len(component.pids),
                    component.pids,
                    strict=True,
                )
            ],
        )
        for component in state.components
    ]
