"""Failover never waits on the lag source: with a Prometheus that accepts connections and never
answers (every read hangs until its timeout), a failover policy still starts its replicas on
partition counts from Kafka's metadata, says it is Degraded and why, and a crashed active replica
is replaced within the Lease duration as with a healthy source."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from groupops.planner.handoff import DEFAULT_LEASE_DURATION_S
from tests.e2e.consumer_e2e import StackFactory
from tests.e2e.operator_support import condition
from tests.e2e.runtime_support import SteadyProducer
from tests.e2e.test_failover import (
    PARTITIONS,
    SCHEDULING_ALLOWANCE_S,
    first_processed_by,
    seconds_until_consuming,
)
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

RENEW_SECONDS = 1
HANG_SECONDS = 60


@pytest.fixture
def black_hole() -> Iterator[str]:
    """http://127.0.0.1:PORT that accepts every connection and never says a word."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            held.append(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(timeout=5)
    for connection in held:
        connection.close()
    server.close()


def test_a_hanging_lag_source_delays_neither_the_start_nor_a_crash_failover(
    new_stack: StackFactory, black_hole: str
) -> None:
    with new_stack(partitions=PARTITIONS, lease_seconds=None, operator_tick=None) as s:
        active, standby = s.identity(0), s.identity(1)
        s.apply(
            strategy={"type": "failover", "failback": False, "autoOffsetReset": "earliest"},
            lagSource={
                "type": "prometheus",
                "prometheus": {"url": black_hole, "timeoutSeconds": HANG_SECONDS},
            },
            consumers={"replicas": 2, "priorities": {active: 20, standby: 10}},
        )
        wait_for(
            "the active owning everything and the standby acknowledging, on counts",
            lambda: s.owner_of_everything() == active and s.settled([active, standby]),
            HANG_SECONDS,  # well before the first read even times out
            interval=0.5,
            explain=s.diagnostics,
        )
        policy = s.api.get("ConsumerGroupPolicy", s.namespace, s.name)
        assert policy is not None
        degraded = condition(policy, "Degraded")
        assert degraded["status"] == "True", degraded
        assert "metadata" in degraded["message"], degraded

        producer = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=4000, rate=250).start()
        wait_for("the active consuming", lambda: first_processed_by(s, active, 0.0), 60, interval=0.5)
        time.sleep(2.0)
        crashed_at = time.time()
        s.kubelet.crash(s.pod(0))
        takeover = seconds_until_consuming(s, standby, crashed_at)
        print(f"\ncrash -> standby consuming with the lag source hanging: {takeover:.2f} s")
        assert takeover <= DEFAULT_LEASE_DURATION_S + RENEW_SECONDS + SCHEDULING_ALLOWANCE_S
        report = s.wait_processed(producer.wait().acked)
        assert report.overlaps == []
        assert report.unexplained == []
