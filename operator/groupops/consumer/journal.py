"""The processing journal: one JSON line per message the runtime accepted as processed, per
commit that succeeded, and per ownership event. For audits (the churn test, the failover
benchmark) and for debugging a handoff; off unless `GROUPOPS_RECORD_DIR` is set.

Each process appends to its own file `<dir>/<identity>.<pid>.<incarnation>.jsonl` with one
unbuffered `write` per line, so a SIGKILL loses at most the line being written. Lines:

    {"k":"p","i":id,"t":topic,"p":partition,"o":offset,"s":start,"e":end}   processed
    {"k":"c","i":id,"t":topic,"p":partition,"o":next offset,"w":time}       committed
    {"k":<event>,"i":id,"w":time,...}   assign, release, ack, fence, resume, stop, lost

Times are wall-clock seconds (all processes of a test share the machine's clock). A message is
journaled only when its callback returned while the Lease was valid: a callback that returns
after the fence deadline (the process was frozen or cut off while processing) is not accepted,
its offset is not stored, and the partition's next owner processes the message again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

__all__ = ["FileJournal", "Journal", "NullJournal", "open_journal"]


class Journal(Protocol):
    def processed(self, topic: str, partition: int, offset: int, start: float, end: float) -> None: ...

    def committed(self, topic: str, partition: int, offset: int, at: float) -> None: ...

    def event(self, kind: str, at: float, **fields: Any) -> None: ...

    def close(self) -> None: ...


class NullJournal:
    """Journaling off."""

    def processed(self, topic: str, partition: int, offset: int, start: float, end: float) -> None:
        return None

    def committed(self, topic: str, partition: int, offset: int, at: float) -> None:
        return None

    def event(self, kind: str, at: float, **fields: Any) -> None:
        return None

    def close(self) -> None:
        return None


class FileJournal:
    """Appends lines to one file of its own (see the module docstring)."""

    def __init__(self, directory: Path, identity: str, incarnation: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{identity}.{os.getpid()}.{incarnation[:8]}.jsonl"
        self._identity = identity
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _write(self, record: dict[str, Any]) -> None:
        if self._fd is not None:
            os.write(self._fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    def processed(self, topic: str, partition: int, offset: int, start: float, end: float) -> None:
        self._write(
            {"k": "p", "i": self._identity, "t": topic, "p": partition, "o": offset, "s": start, "e": end}
        )

    def committed(self, topic: str, partition: int, offset: int, at: float) -> None:
        self._write({"k": "c", "i": self._identity, "t": topic, "p": partition, "o": offset, "w": at})

    def event(self, kind: str, at: float, **fields: Any) -> None:
        self._write({"k": kind, "i": self._identity, "w": at, **fields})

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def open_journal(directory: Path | None, identity: str, incarnation: str) -> Journal:
    return NullJournal() if directory is None else FileJournal(directory, identity, incarnation)
