"""Run a Python snippet in a child process with the repository's `operator/` on its path: for what
must happen in a JVM (or a PySpark process) of its own, away from the shared test session's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

OPERATOR = Path(__file__).resolve().parents[2] / "operator"


def child_environment() -> dict[str, str]:
    """This process's environment with the repository's `operator/` first on PYTHONPATH."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(OPERATOR), os.environ.get("PYTHONPATH")])),
    }


def run_python(code: str, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """`python -c code args...`; fails the test with the end of its stderr if it exits non-zero."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=child_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done
