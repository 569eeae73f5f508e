"""`python -m groupops.devstack up|down|status [--state-dir .dev]`: the developer's stack.

    up       start one Kafka broker and the API server (detached), write <state-dir>/env
    down     stop them
    status   show what runs, with resident memory
    warm     record the Kafka JVM's class-data-sharing archives in the cache (`make stack` does)

Exit code 1 with one `Error: ...` line when a component cannot start or no stack is recorded.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from groupops.devstack import session
from groupops.devstack.errors import DevstackError
from groupops.devstack.kafka import record_class_data

_MIB = 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m groupops.devstack", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("up", "down", "status", "warm"))
    parser.add_argument("--state-dir", type=Path, default=Path(".dev"), help="default: .dev")
    parser.add_argument("--brokers", type=int, default=1, help="Kafka nodes for `up` (default 1)")
    parser.add_argument("--no-kafka", action="store_true", help="`up` without Kafka")
    parser.add_argument("--no-kube", action="store_true", help="`up` without the API server")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.command == "up":
            state = session.up(
                args.state_dir, kafka=not args.no_kafka, kube=not args.no_kube, brokers=args.brokers
            )
            for component in state.components:
                print(f"{component.name}: {component.address} ready in {component.ready_seconds:.1f} s")
            print(f"stack up in {state.up_seconds:.1f} s; run: source {args.state_dir}/env")
        elif args.command == "warm":
            with tempfile.TemporaryDirectory(prefix="groupops-warm-") as workdir:
                for archive in record_class_data(Path(workdir)):
                    print(f"recorded {archive} ({archive.stat().st_size / _MIB:.0f} MiB)")
        elif args.command == "down":
            stopped = session.down(args.state_dir)
            print(f"stopped {len(stopped)} process(es)")
        else:
            for component, processes in session.status(args.state_dir):
                for name, pid, alive, rss in processes:
                    memory = "-" if rss is None else f"{rss / _MIB:.0f} MiB"
                    state_word = "running" if alive else "gone"
                    print(f"{name}\t{component.address}\tpid {pid}\t{state_word}\tRSS {memory}")
    except DevstackError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
