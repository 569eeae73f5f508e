"""A replica whose validity ran out wakes to a granted heartbeat: it must not commit or release
the partitions it held before the gap (docs/design.md §7.6, "a lapse is a fence, even when the
process wakes to a grant"), against the real API server, the real broker, the operator's real
heartbeat server and a real `groupops consume` process.

The order that broke committed offsets in the churn test is made deterministic here:
1. replica A owns every partition; its processing loop stops inside a callback (a message `hold`
   on partition 0) while its heartbeat thread runs on;
2. A is cut off: the answerer stands by (`not-leader`) and A's path to the API server is cut, so
   its fallback Lease writes fail and its validity runs out;
3. the operator (here, the test) fences A and publishes a plan that gives everything to B, which
   consumes partition 0 past A's position and commits;
4. the answerer leads again, its view of A's Lease still the one from before the fence (a mirror
   behind the write), so A's next heartbeat is *granted*: A is valid again, and nothing has told
   it of the fence;
5. only then A's callback returns.

A may neither commit nor release what it held before the gap: it journals a self-fence, no
commit and no release, the group's committed offsets never move backwards, and `owns()`, asked
by the callback as it returns, says no. (Without the lapse
fence A releases both partitions on the stale plan view and learns of the fence a few ms later,
when that release's report conflicts on its Lease. Here the committer's foreign-commit check,
first thing after the long callback, happens to adopt B's offset before that release commits; a
process frozen outside a callback resumes at the top of its loop and releases first, which is how
the churn test's CI run saw committed offsets move back 260 messages.)
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from groupops.consumer import owns
from groupops.consumer.audit import load_journals
from groupops.controller.heartbeats import HeartbeatBook, HeartbeatServer
from groupops.kubeapi import KubeClient
from groupops.model import MemberId, TopicPartition
from groupops.planner.handoff import LeaseClock, MemberState, next_plan
from groupops.planner.plan_format import (
    PublishedPlan,
    empty_plan,
    fence_annotations,
    lease_record,
    render_plan_configmap,
)
from groupops.planner.wire import lease_name, plan_configmap_name
from tests.e2e.plan_driver import PlanDriver
from tests.e2e.runtime_support import CommittedOffsets, ProducedLog, produce
from tests.e2e.waiting import wait_for
from tests.integration.test_consumer_runtime import LEASE_SECONDS, STARTUP_S, Group

pytestmark = pytest.mark.integration

HOLD = b"hold"
HOLD_PATTERN = "GROUPOPS_TEST_HOLD_IDENTITY"
HOLD_DIR = "GROUPOPS_TEST_HOLD_DIR"
REPO_ROOT = Path(__file__).resolve().parents[2]


def hold_until_released(message: Any) -> None:
    """The test processor (`GROUPOPS_PROCESSOR=tests.integration.test_consumer_lapse:hold_until_released`):
    in the process named by $GROUPOPS_TEST_HOLD_IDENTITY, the message `hold` writes `holding` in
    $GROUPOPS_TEST_HOLD_DIR and returns only once `release` appears there, writing what `owns` said
    then to `owns-after`; everything else goes through."""
    if message.value() != HOLD or os.environ.get("GROUPOPS_IDENTITY") != os.environ.get(HOLD_PATTERN):
        return
    directory = Path(os.environ[HOLD_DIR])
    (directory / "holding").touch()
    while not (directory / "release").exists():
        time.sleep(0.05)
    # What a callback asks right before a side effect outside Kafka (docs/consumers.md).
    (directory / "owns-after").write_text(str(owns(message.topic(), message.partition())))


class StaleView:
    """The answerer's view of the Leases: live from the API server, except those frozen at a
    copy (a mirror that has not yet received the latest write)."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self._frozen: dict[tuple[str, str], dict[str, Any] | None] = {}

    def __call__(self, namespace: str, name: str) -> dict[str, Any] | None:
        if (namespace, name) in self._frozen:
            return self._frozen[(namespace, name)]
        return self._client.get("coordination.k8s.io/v1", "Lease", namespace, name)

    def freeze(self, namespace: str, name: str) -> None:
        self._frozen[(namespace, name)] = self._client.get("coordination.k8s.io/v1", "Lease", namespace, name)

    def thaw(self) -> None:
        self._frozen.clear()


def publish(
    g: Group,
    previous: PublishedPlan,
    target: Mapping[str, Sequence[TopicPartition]],
    expired: Sequence[str] = (),
) -> PublishedPlan:
    """The operator's publish step by hand: `next_plan` on the Leases as they are, then the ConfigMap."""
    identities = set(target) | set(expired) | {str(i) for i in previous.plan.assignment}
    states = {
        MemberId(identity): MemberState.from_record(lease_record(lease_annotations_of(g, identity)))
        for identity in identities
    }
    result = next_plan(
        previous,
        {MemberId(k): tuple(v) for k, v in target.items()},
        states,
        expired=[MemberId(i) for i in expired],
        strategy="test",
        now=time.time(),
    )
    assert result.changed and not result.waiting, "every partition moves at once here"
    body = render_plan_configmap(g.namespace, g.policy, result.published)
    existing = g.api.get("ConfigMap", g.namespace, plan_configmap_name(g.policy))
    if existing is None:
        g.api.create("ConfigMap", g.namespace, body)
    else:
        body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        g.api.replace("ConfigMap", g.namespace, body)
    return result.published


def lease_annotations_of(g: Group, identity: str) -> dict[str, str] | None:
    meta: dict[str, Any] = g.lease(identity)["metadata"]  # type: ignore[assignment]
    return meta.get("annotations")


def produce_to(bootstrap: str, topic: str, partition: int, values: Sequence[bytes], log: ProducedLog) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        log.acked.append((message.topic(), message.partition(), message.offset()))

    for value in values:
        producer.produce(topic, value, partition=partition, on_delivery=delivered)
    assert producer.flush(60) == 0


@dataclass
class Answerer:
    """The operator's real heartbeat server on a `StaleView`, leading while `leading` is set."""

    server: HeartbeatServer
    view: StaleView
    clock: LeaseClock
    leading: threading.Event = field(default_factory=threading.Event)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def granted_after(self, lease: str, moment: float) -> bool:
        heard = self.clock.heard_at(MemberId(lease))
        return heard is not None and heard > moment


@pytest.fixture
def answerer(client: KubeClient) -> Iterator[Callable[[Group], Answerer]]:
    servers: list[HeartbeatServer] = []

    def start(g: Group) -> Answerer:
        view = StaleView(client)
        leading = threading.Event()
        leading.set()
        book = HeartbeatBook(leases=view, leading=leading.is_set, leader_address=lambda: None)
        clock = LeaseClock()
        book.attach(g.namespace, g.policy, clock)
        server = HeartbeatServer(book, "127.0.0.1", 0)
        server.start()
        servers.append(server)
        return Answerer(server, view, clock, leading)

    yield start
    for server in servers:
        server.stop()


def acted_since(g: Group, identity: str, since: float) -> str | None:
    """The first fence or release `identity` journaled at or after `since` (wall time), if any."""
    events = sorted(
        (e for e in load_journals(g.journal_dir).events if e.get("i") == identity and e["w"] >= since),
        key=lambda e: e["w"],
    )
    return next((str(e["k"]) for e in events if e.get("k") in ("fence", "release")), None)


def test_a_replica_woken_by_a_grant_after_its_validity_ran_out_commits_and_releases_nothing(
    make_group: Callable[..., Group], answerer: Callable[[Group], Answerer], tmp_path: Path
) -> None:
    g = make_group(2)
    op = answerer(g)
    a, b = g.identity(0), g.identity(1)
    PlanDriver(
        api=g.api,
        namespace=g.namespace,
        policy=g.policy,
        identities=[a, b],
        target=lambda live: {},
        lease_seconds=LEASE_SECONDS,
    ).create_leases()
    partitions = [TopicPartition(g.topic, p) for p in range(g.partitions)]
    first = publish(g, empty_plan("test"), {a: partitions, b: []})
    hold_dir = tmp_path / "hold"
    hold_dir.mkdir()
    extra = {
        "GROUPOPS_HEARTBEAT_ADDRESSES": op.address,
        "GROUPOPS_PROCESSOR": f"{__name__}:hold_until_released",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        HOLD_PATTERN: a,
        HOLD_DIR: str(hold_dir),
    }
    g.consumer(a, extra=extra)
    g.consumer(b, extra=extra)
    wait_for(
        "both replicas acknowledging the first plan",
        lambda: g.acked(a) == first.epoch and g.acked(b) == first.epoch,
        STARTUP_S,
        explain=g.diagnostics,
    )
    log = ProducedLog()
    produce(g.bootstrap, g.topic, 60, g.partitions, log=log)
    offsets = CommittedOffsets(g.bootstrap, g.group_id, g.topic, g.partitions, every_s=0.05).start()
    on_first = sum(1 for _, partition, _ in log.acked if partition == 0)
    wait_for(
        "A committing partition 0", lambda: offsets.highest.get(0) == on_first, 60, explain=g.diagnostics
    )

    # 1. A's loop stops inside the callback of `hold`; 30 more messages wait behind it.
    produce_to(g.bootstrap, g.topic, 0, [HOLD], log)
    wait_for("A holding", (hold_dir / "holding").exists, 60, explain=g.diagnostics)
    produce_to(g.bootstrap, g.topic, 0, [b"after-%d" % i for i in range(30)], log)
    try:
        # 2. Cut off: no grant, no Lease write. The answerer's view of A stays from before the fence.
        op.view.freeze(g.namespace, lease_name(g.policy, a))
        op.leading.clear()
        g.proxies[a].cut()
        cut_at = time.time()
        time.sleep(LEASE_SECONDS + 1.0)  # past A's validity (3 s after its last grant) and its Lease

        # 3. The operator's fence of A, then everything to B; B consumes `hold` and what follows.
        lease = g.lease(a)
        meta: dict[str, Any] = lease["metadata"]  # type: ignore[assignment]
        incarnation = lease_record(meta.get("annotations")).incarnation
        g.api.patch(
            "Lease",
            g.namespace,
            lease_name(g.policy, a),
            {
                "metadata": {
                    "resourceVersion": meta["resourceVersion"],
                    "annotations": fence_annotations(first.epoch, incarnation),
                }
            },
        )
        second = publish(g, first, {a: [], b: partitions}, expired=[a])
        # 4. The answerer leads again; A's heartbeats are granted on the stale view.
        op.leading.set()
        wait_for(
            "B acknowledging the second plan", lambda: g.acked(b) == second.epoch, 60, explain=g.diagnostics
        )
        after_b = on_first + 1 + 30
        wait_for(
            "B committing partition 0 past A's position",
            lambda: offsets.highest.get(0) == after_b,
            60,
            explain=g.diagnostics,
        )
        g.proxies[a].restore()
        lease_a = lease_name(g.policy, a)
        restored = time.monotonic()
        wait_for(
            "a heartbeat of A granted", lambda: op.granted_after(lease_a, restored), 30, explain=g.diagnostics
        )
        first_grant = op.clock.heard_at(MemberId(lease_a))
        assert first_grant is not None
        # A sends its next heartbeat only once it has the answer to the last one.
        wait_for("a second one", lambda: op.granted_after(lease_a, first_grant), 30, explain=g.diagnostics)
        time.sleep(2.0)  # A's plan watch reconnects through the restored path and sees the second plan

        # 5. A's callback returns.
        released_at = time.time()
        (hold_dir / "release").touch()
        wait_for(
            "A acting on the gap (a fence or a release)",
            lambda: acted_since(g, a, released_at) is not None,
            30,
            explain=g.diagnostics,
        )
        time.sleep(3.0)  # A's commit interval (1 s) passes twice: a stale commit would have landed
    finally:
        offsets.stop()
        op.view.thaw()

    assert offsets.regressions == [], f"committed offsets moved backwards: {offsets.regressions}"
    assert offsets.highest[0] >= after_b
    journals = load_journals(g.journal_dir)
    stale_commits = [(at, offset) for at, offset in journals.commits.get((a, g.topic, 0), []) if at >= cut_at]
    assert stale_commits == [], f"A committed partition 0 after its validity ran out: {stale_commits}"
    releases = [
        e for e in journals.events if e.get("i") == a and e.get("k") == "release" and e["w"] >= cut_at
    ]
    assert releases == [], f"A released partitions it held before the gap: {releases}"
    assert acted_since(g, a, released_at) == "fence", g.diagnostics()
    assert (hold_dir / "owns-after").read_text() == "False", "owns() said yes to a partition that had moved"
