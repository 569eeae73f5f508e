"""A server the devstack starts runs in a process group of its own inside the caller's session
(devstack/process.py): one signal to the group stops it with what it started, and it stays in the
caller's scheduling group, so `make test`'s lane priorities reach it (docs/design.md §11)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from groupops.devstack.process import ManagedProcess, signal_group

# The server starts a child of its own, writes the child's pid and waits on it.
SERVER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1], "w").write(str(child.pid))
child.wait()
"""


def gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":  # exited, not yet reaped
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_a_server_has_its_own_group_in_the_callers_session_and_dies_with_what_it_started(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "child.pid"
    server = ManagedProcess(
        "server", [sys.executable, "-c", SERVER, str(pid_file)], log_path=tmp_path / "log"
    )
    server.start()
    try:
        server.wait_ready(pid_file.exists, timeout_s=30, what="its child started")
        child = int(pid_file.read_text())
        assert os.getpgid(server.pid) == server.pid, "the server leads a process group of its own"
        assert os.getpgid(child) == server.pid, "what it starts is in its group"
        assert os.getsid(server.pid) == os.getsid(0), "a new session would be an autogroup of its own"
        autogroup = Path("/proc/self/autogroup")
        if autogroup.exists():  # kernels with CONFIG_SCHED_AUTOGROUP
            theirs = Path(f"/proc/{server.pid}/autogroup").read_text().split()[0]
            assert theirs == autogroup.read_text().split()[0]
        assert os.getpriority(os.PRIO_PROCESS, server.pid) == os.getpriority(os.PRIO_PROCESS, 0)

        signal_group(server.pid, signal.SIGKILL)
        assert gone(child), "the server's child outlived the signal to the group"
        assert server.stop(timeout_s=5) == -signal.SIGKILL
    finally:
        server.stop(timeout_s=5)
