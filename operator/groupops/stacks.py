"""`kill -USR1 <pid>` prints every thread's Python stack to stderr and the process goes on:
how to see where a live operator, its answering process or a consumer waits (docs/operations.md,
"Where a stuck process waits"). Standard library only, so any process of ours may install it."""

from __future__ import annotations

import faulthandler
import signal

__all__ = ["dump_stacks_on_usr1"]


def dump_stacks_on_usr1() -> None:
    """Also prints the stacks on a fatal signal (a crash inside a C extension such as librdkafka
    would otherwise end the process without a word in its log)."""
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
