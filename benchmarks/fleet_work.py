"""The per-message cost of the fleet benchmark's consumers (benchmarks/fleet.py): a
`GROUPOPS_PROCESSOR` callback (`fleet_work:process`) that sleeps `FLEET_WORK_MS` milliseconds per
message (default 40).

Sleeping, not spinning: 80 consumer processes share a 2-core machine with the broker, the API
server and the operator, so the work must cost wall time and not CPU. A replica then drains at
most about 1000 / FLEET_WORK_MS messages per second whatever the machine's load, which is what
makes "hot partitions on one replica" fall behind and "spread" keep up. The kubelet harness puts
this directory on the consumers' PYTHONPATH (the fleet benchmark's `extra_env`).
"""

from __future__ import annotations

import os
import time
from typing import Any

__all__ = ["WORK_SECONDS", "process"]

WORK_SECONDS = float(os.environ.get("FLEET_WORK_MS", "40")) / 1000.0
"""Read once at import: the consumer loads its processor once per process."""


def process(message: Any) -> None:
    """Pretend to work on one message for WORK_SECONDS."""
    time.sleep(WORK_SECONDS)
