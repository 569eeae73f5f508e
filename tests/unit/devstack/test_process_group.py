"""How the devstack starts a server (devstack/process.py): by default in a session of its own (a
scheduling group of its own under autogroups, at full weight beside a niced test lane); Spark's
daemons with `own_session=False`, in a process group of their own inside the caller's session, so
that the spark lane's idle priority reaches them (docs/design.md §11). Either way one signal to
the group stops the server with what it started."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

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


def autogroup_of(pid: int) -> str | None:
    """The task's autogroup, or None for the kernel's default one: the kernel prints an empty
    `/proc/<pid>/autogroup` for a task whose session never got an autogroup of its own (one that
    descends from init without a `setsid` since, as the CI machine's jobs do). A new session gets
    its own autogroup there too (docs/design.md §11)."""
    fields = Path(f"/proc/{pid}/autogroup").read_text().split()
    return fields[0] if fields else None


KERNEL_HAS_AUTOGROUPS = Path("/proc/self/autogroup").exists()


@pytest.mark.parametrize("own_session", [True, False], ids=["own-session", "callers-session"])
def test_a_server_leads_its_group_in_the_session_asked_for_and_dies_with_what_it_started(
    tmp_path: Path, own_session: bool
) -> None:
    pid_file = tmp_path / "child.pid"
    server = ManagedProcess(
        "server",
        [sys.executable, "-c", SERVER, str(pid_file)],
        log_path=tmp_path / "log",
        own_session=own_session,
    )
    server.start()
    try:
        server.wait_ready(pid_file.exists, timeout_s=30, what="its child started")
        child = int(pid_file.read_text())
        assert os.getpgid(server.pid) == server.pid, "the server leads a process group of its own"
        assert os.getpgid(child) == server.pid, "what it starts is in its group"
        assert (os.getsid(server.pid) == server.pid) is own_session
        assert (os.getsid(server.pid) == os.getsid(0)) is not own_session
        if KERNEL_HAS_AUTOGROUPS:
            ours, its = autogroup_of(os.getpid()), autogroup_of(server.pid)
            assert (its == ours) is not own_session, (
                f"our autogroup {ours!r}, the server's {its!r}: a session of its own is an "
                "autogroup of its own, the caller's session shares the caller's"
            )

        signal_group(server.pid, signal.SIGKILL)
        assert gone(child), "the server's child outlived the signal to the group"
        assert server.stop(timeout_s=5) == -signal.SIGKILL
    finally:
        server.stop(timeout_s=5)
