"""`groupops reset-offsets` against the real operator, replicas and broker (issue 10, design §9.3):
a dry run shows Kafka's table and changes nothing; an executed reset while messages keep arriving
pauses the partitions, moves the offsets and resumes: every message from the new position on is
processed (again), and no partition is ever consumed by two replicas at once."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from groupops.consumer.audit import load_journals
from tests.e2e.consumer_e2e import PolicyStack, StackFactory
from tests.e2e.runtime_support import SteadyProducer
from tests.e2e.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]

PARTITIONS = 4
REPLICAS = 2
GROUPOPS = str(Path(sys.executable).with_name("groupops"))


def group_offsets(s: PolicyStack) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": s.bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(s.group_id)], request_timeout=10)
    partitions = next(iter(result.values())).result().topic_partitions
    return {tp.partition: tp.offset for tp in partitions if tp.offset >= 0}


def reset(s: PolicyStack, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            GROUPOPS,
            "reset-offsets",
            s.name,
            "-n",
            s.namespace,
            "--kubeconfig",
            s.kubectl.kubeconfig,
            *options,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_reset_offsets_dry_run_then_executed_while_consuming(new_stack: StackFactory) -> None:
    with new_stack(partitions=PARTITIONS) as s:
        identities = [s.identity(i) for i in range(REPLICAS)]
        s.apply(strategy={"type": "range", "autoOffsetReset": "earliest"}, consumers={"replicas": REPLICAS})
        wait_for("both replicas acknowledging", lambda: s.settled(identities), 180, explain=s.diagnostics)
        first = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=800, rate=400).start().wait().acked
        s.wait_processed(first, timeout=120)
        everything = dict.fromkeys(range(PARTITIONS), 200)
        wait_for("every offset committed", lambda: group_offsets(s) == everything, 30)

        dry = reset(s, "--to-offset", "50", "--topic", f"{s.topic}:1")
        assert dry.returncode == 0, dry.stderr
        assert "DryRun" in dry.stdout and "200" in dry.stdout and "50" in dry.stdout, dry.stdout
        assert group_offsets(s) == everything, "a dry run changes nothing"

        more = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=4000, rate=400).start()
        time.sleep(2.0)
        asked_at = time.time()
        done = reset(s, "--to-earliest", "--execute")
        finished_at = time.time()
        print(f"\n{done.stdout}\nreset took {finished_at - asked_at:.1f} s")
        assert done.returncode == 0, done.stderr
        assert "Done" in done.stdout
        status = s.status()["offsetReset"]
        assert status["state"] == "Done" and len(status["partitions"]) == PARTITIONS
        assert {row["after"] for row in status["partitions"]} == {0}

        produced = more.wait().acked
        report = s.wait_processed(first + produced, timeout=240)
        journals = load_journals(s.record_dir)
        again = {(r.partition, r.offset) for r in journals.processed if r.start >= asked_at}
        missing_again = [(p, o) for p in range(PARTITIONS) for o in range(200) if (p, o) not in again]
        print(f"{report.summary()}; processed again after the reset: {len(again)}")
        assert missing_again == [], f"not processed again from the new position: {missing_again[:5]}"
        assert report.overlaps == [], report.overlaps[:3]
        plan = s.plan()
        assert plan is not None
        assert sum(len(p) for p in plan.plan.assignment.values()) == PARTITIONS, (
            "every partition is owned again"
        )
