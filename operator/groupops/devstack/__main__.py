"""`python -m groupops.devstack up|down|status [--state-dir .dev]`: the developer's stack.

    up       start one Kafka broker and the API server (detached), write <state-dir>/env
    down     stop them
    status   show what runs, with resident memory
    warm     record the Kafka JVM's class-data-sharing archives in the cache (`make stack` does)
    demo     groupops' main job end to end on a stack of its own (devstack/demo.py; `make demo`);
             --short for the tests' shorter scenario; --kubeconfig and --bootstrap-server use a
             running stack instead, --namespace then names a new namespace for it
    build    `build -- COMMAND...`: run the command that builds the stack (`make demo` runs
             `make stack kubetools`), saying first what is missing and then how long it has run

Exit code 1 with one `Error: ...` line when a component cannot start, no stack is recorded or a
step of the demo fails; 130 when the demo is interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from groupops.devstack import demo, session
from groupops.devstack.demo_stack import build_with_progress
from groupops.devstack.errors import DevstackError
from groupops.devstack.kafka import record_class_data

_MIB = 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m groupops.devstack", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("up", "down", "status", "warm", "demo", "build"))
    parser.add_argument("--state-dir", type=Path, default=Path(".dev"), help="default: .dev")
    parser.add_argument("--brokers", type=int, default=1, help="Kafka nodes for `up` (default 1)")
    parser.add_argument("--no-kafka", action="store_true", help="`up` without Kafka")
    parser.add_argument("--no-kube", action="store_true", help="`up` without the API server")
    parser.add_argument("--short", action="store_true", help="`demo`: the shorter scenario (tests)")
    parser.add_argument("--kubeconfig", help="`demo`: use this running API server")
    parser.add_argument("--bootstrap-server", help="`demo`: use this running Kafka")
    parser.add_argument("--namespace", default="demo", help="`demo`: its namespace (default demo)")
    parser.add_argument("--keep-logs", type=Path, help="`demo`: write logs and journals here, kept")
    parser.add_argument("build_command", nargs="*", help="`build`: the command, after --")
    args = parser.parse_args(argv)
    if args.command == "build":
        if not args.build_command:
            parser.error("build needs a command: build -- make stack kubetools")
        return build_with_progress(args.build_command, say=demo.say)
    logging.basicConfig(
        level=logging.WARNING if args.command == "demo" else logging.INFO, format="%(message)s"
    )
    if args.command == "demo":
        return demo.main(
            demo.SHORT if args.short else demo.FULL,
            kubeconfig=args.kubeconfig,
            bootstrap=args.bootstrap_server,
            namespace=args.namespace,
            keep=args.keep_logs,
        )
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
