"""One server process of the local stack: started with its output in a log file, polled until
ready, stopped with SIGTERM then SIGKILL, measured (RSS) while it runs.

Processes are started in a session of their own so that a Ctrl-C in the terminal reaches the
caller (which then stops them in order) and never the servers directly, and so that `dev-up` can
leave them running after its Python process exits. With the kernel's autogroups a session is also a
scheduling group of its own, at full weight whatever the caller's niceness: the stack's servers
stand for other machines, and keep their pace beside a niced test lane. Spark's daemons are the
exception (`own_session=False`): a process group of their own inside the caller's session, so
that the spark lane's idle priority reaches them (docs/design.md §11). `stop_pids`
stops such detached processes later, after checking (through /proc) that the pid still runs the
command we started, not a reused pid.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from groupops.devstack.errors import StartError

__all__ = [
    "PORT_BAND_VARIABLE",
    "ManagedProcess",
    "free_port",
    "is_ours",
    "log_tail",
    "port_taken",
    "rss_bytes",
    "signal_group",
    "signal_pids",
    "stop_pids",
]

_POLL_S = 0.2


_LISTEN_PORTS_FROM = 20000
"""Ports for the stack's servers are drawn from here up to the kernel's ephemeral range."""


_GIVEN: dict[socket.SocketKind, set[int]] = {socket.SOCK_STREAM: set(), socket.SOCK_DGRAM: set()}
"""Ports this process handed out: never handed out twice, since the caller may not have bound
the first yet (a random draw repeated itself for two flags of one operator in CI)."""


PORT_BAND_VARIABLE = "GROUPOPS_PORT_BAND"
"""`K/N`: this process draws its ports from the K-th of N equal bands of the range (0-based), so
that processes drawing at once (the test lanes, tests/lanes.py) never draw the same port: a port
is free when drawn, but the server given it binds it later, and another process's draw in
between could take it (docs/design.md §11)."""


def free_port(kind: socket.SocketKind = socket.SOCK_STREAM) -> int:
    """A port on 127.0.0.1 that was free a moment ago, drawn at random below the kernel's
    ephemeral range (within this process's band, `PORT_BAND_VARIABLE`): a port from that range
    (the kernel's pick for port 0) can be handed to any process's outgoing connection, or to the
    next caller's port 0, before the server that was given it binds it. Falls back to the
    kernel's pick when no port below the range is free."""
    low, high = _port_band(_LISTEN_PORTS_FROM, _ephemeral_start())
    for _ in range(64):
        port = random.randrange(low, high) if high > low + 1000 else 0
        if port in _GIVEN[kind]:
            continue  # two draws of one command (--health-port, --metrics-port) must differ
        with socket.socket(socket.AF_INET, kind) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            chosen: int = probe.getsockname()[1]
            _GIVEN[kind].add(chosen)
            return chosen
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        fallback: int = probe.getsockname()[1]
        return fallback


def _port_band(low: int, high: int) -> tuple[int, int]:
    """[low, high) narrowed to this process's band (the whole of it without one)."""
    band = os.environ.get(PORT_BAND_VARIABLE)
    if not band:
        return low, high
    try:
        index, count = (int(part) for part in band.split("/"))
        if not 0 <= index < count:
            raise ValueError
    except ValueError:
        raise ValueError(f"{PORT_BAND_VARIABLE} must be K/N with 0 <= K < N, got {band!r}") from None
    width = (high - low) // count
    return low + index * width, low + (index + 1) * width


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def log_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file, or a note that it does not exist."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def rss_bytes(pid: int) -> int | None:
    """Resident set size of a live process (VmRSS in /proc), None when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def _cmdline(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode("utf-8", "replace")


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def signal_group(group: int, signum: signal.Signals) -> None:
    """Send `signum` to process group `group`, if it still exists and is ours to signal (what a
    server started in its own session or group leaves behind: its Python workers, its executors)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def port_taken(error: StartError) -> bool:
    """True when a server failed because another process bound its port first: the window
    between `free_port` and the server's own bind. The caller retries with new ports."""
    if error.log_path is None:
        return False
    return "address already in use" in log_tail(error.log_path, 200).lower()


def is_ours(pid: int, marker: str) -> bool:
    """True when `pid` is alive and its command line contains `marker` (its state directory):
    the guard against signalling a pid the kernel has since given to another program."""
    command = _cmdline(pid)
    return command is not None and marker in command


def signal_pids(pids: Sequence[int], marker: str) -> list[int]:
    """SIGTERM to each of `pids` that is ours (see `is_ours`), without waiting."""
    ours = [pid for pid in pids if is_ours(pid, marker)]
    for pid in ours:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    return ours


def stop_pids(pids: Sequence[int], marker: str, timeout_s: float = 20.0) -> list[int]:
    """Stop detached servers together: SIGTERM to all, then SIGKILL to those still running after
    `timeout_s`. Skips pids that are not ours (see `is_ours`). Returns the pids it stopped."""
    ours = signal_pids(pids, marker)
    deadline = time.monotonic() + timeout_s
    for pid in ours:
        if not _wait_gone(pid, max(0.1, deadline - time.monotonic())):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 5.0)
    return ours


class ManagedProcess:
    """A server we started. `name` appears in messages; `log_path` receives stdout and stderr."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        own_session: bool = True,
    ) -> None:
        self.name = name
        self.own_session = own_session
        self.argv = list(argv)
        self.log_path = log_path
        self._env = dict(os.environ if env is None else env)
        self._cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.ready_after_s: float | None = None

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"{self.name} was never started")
        return self._popen.pid

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self._cwd,
                start_new_session=self.own_session,
                process_group=None if self.own_session else 0,
            )
        self.started_at = time.monotonic()

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def wait_ready(self, probe: Callable[[], bool], *, timeout_s: float, what: str) -> float:
        """Poll `probe` until it returns True; returns seconds since start. Raises StartError,
        with the log's tail, when the process exits first or `timeout_s` passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.alive():
                code = None if self._popen is None else self._popen.returncode
                raise StartError(
                    f"{self.name} exited (code {code}) before {what}; log {self.log_path}:\n"
                    f"{log_tail(self.log_path)}",
                    self.log_path,
                )
            if probe():
                break
            if time.monotonic() > deadline:
                raise StartError(
                    f"{self.name} not ready ({what}) after {timeout_s:.0f} s; log {self.log_path}:\n"
                    f"{log_tail(self.log_path)}",
                    self.log_path,
                )
            time.sleep(_POLL_S)
        assert self.started_at is not None
        self.ready_after_s = time.monotonic() - self.started_at
        return self.ready_after_s

    def rss(self) -> int | None:
        return rss_bytes(self.pid) if self.alive() else None

    def terminate(self) -> None:
        """Send SIGTERM without waiting (to stop several servers in parallel)."""
        if self.alive():
            assert self._popen is not None
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout_s`. Idempotent. Returns the exit code."""
        if self._popen is None:
            return None
        self.terminate()
        try:
            return self._popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            return self._popen.wait(timeout=10)
