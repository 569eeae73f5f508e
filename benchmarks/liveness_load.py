"""Liveness at scale: Lease renewals against heartbeats, with a load generator that plays every
consumer replica, on the real API server (kube-apiserver + etcd of `groupops.devstack`).

    env -u KUBECONFIG .venv/bin/python benchmarks/liveness_load.py [--counts 100 1000]
        [--modes renewal heartbeat heartbeat-kubelet] [--steady 60] [--crashes 10] [--takeovers 0]
        [--handovers 0]
        [--lag-source static|kafka] [--busy-topics T] [--produce-rate 2000]
        [--operator-arg=--FLAG=VALUE ...] [--json FILE]

Per (N, mode), N outer: a fresh API server (with $KUBECONFIG set: a fresh namespace on that one
instead), one `groupops operator` (its defaults: tick 5 s, Lease duration 4 s, leader election
on; in heartbeat mode `--heartbeat-port P --heartbeat-address 127.0.0.1:P`), N policies as
operator_scale.py makes them (3 replicas, 12 partitions, `lagSource: static`: no broker, no
kubelet, pods stay Pending; a static lag never changes, so every policy settles and its tick
stops after its settled check), and a load generator in its own process (this file with `--play`,
so its CPU is its own and is measured apart) that plays the consumer side of all 3N replicas the
way consumer/lease.py and consumer/runtime.py do, without Kafka:

- take: each replica's Lease once the operator created it (found by listing the namespace's
  Leases every 2 s until all are held), compare-and-swap PUT, state `starting`, as `_take` does;
- acknowledge: every new plan of its policy (one watch on the namespace's ConfigMaps, where each
  real replica watches its own) with a compare-and-swap PUT: acked epoch, its set in that plan,
  state `active`. A conflict re-reads the Lease; `released-through` above the replica's floor is
  a fence (counted: the replica reports nothing owned and waits for a plan above the floor);
- liveness, per replica, one action per second after the previous one ended (`_run`):
  renewal mode, a compare-and-swap PUT (renewTime moves); heartbeat mode, one UDP heartbeat
  (one shared socket, one receiver thread; `seq` is unique over the fleet, so an answer finds
  its replica), and a Lease write instead when the report changed, after a refusal (its
  compare-and-swap reveals a fence) or when no leader's answer came within 0.75 s, unless the
  validity still covers a later write (`LeaseKeeper._fallback_may_wait`).
  A failed write is retried once after 0.25 s. A crashed replica is simply no longer played.
- mode `heartbeat-kubelet`: heartbeats, and the generator also plays each pod's kubelet where a
  crash is concerned: every replica's incarnation names its pod's UID (the pods are listed
  before the takes, as the downward API tells a real replica), and a crash is reported on the
  pod's status (`lastState.terminated`, one status PATCH) after a delay uniform in 0-1 s (a
  kubelet's relist period), so the operator may void the holder at once (planner/exits.py).

With `--lag-source kafka`, a busy fleet instead: every policy's lag moves between two of its
reads, so every tick of every policy finds a change, runs in full and writes the policy's status.
Per (N, mode), a Kafka broker of its own (`groupops.devstack.kafka.KafkaCluster`, on 127.0.0.1,
under the work directory); T = `--busy-topics` (default max(1, N // 10)) topics `busy-<k>` of 12
partitions, which the policies share (policy i reads `busy-<i mod T>`: N topics of their own would
ask one broker for 12 N partitions); every policy's group committed at offset 0 on each of its
topic's partitions before the policies exist, so its lag is defined from the first read; a
producer in its own process (this file with `--produce`, its CPU measured apart) writing
`--produce-rate` small messages a second in all, round-robin over every partition, from before
the policies are created to the end; the policies read `lagSource: {type: kafka}` on that broker.
Nothing consumes (the pods stay Pending), so every group's lag grows by rate / (12 T) messages a
second on each partition.

Writes go through a pool of `--write-threads` threads (48; one keep-alive HTTPS connection
each), so at most that many requests of the fleet are in flight, where 3N real replicas would
each have their own: under saturation the real fleet would pile more onto the API server.

Measured, per (N, mode):
1. setup: creating the policies, then until every replica holds its Lease and acknowledged its
   policy's newest plan, with no plan changing for 5 s (`--setup-timeout`; on a timeout the run
   goes on and says so);
2. steady state, a window of `--steady` seconds: API requests/s besides WATCH by verb and
   resource (the API server's apiserver_request_total, every client), Lease PUTs/s and that as
   % of replicas per second (target <= 1 %), CPU % of one core (utime+stime of /proc/<pid>/stat)
   of the operator, kube-apiserver, etcd and the load generator (with kafka: the broker's JVM and
   the producer too), and of the whole machine (/proc/stat; what none of ours used is another
   job's), status PATCHes/s of the policies (`consumergrouppolicies/status`), full reconciles/s
   and settled checks that skipped the rest of the run/s (the operator's
   groupops_reconcile_duration_seconds_count, groupops_reconciles_skipped_total), status writes
   the operator held back because only lag figures moved (groupops_status_figures_held_total: a
   busy policy's status is written once per its --status-figures-interval, not at every tick;
   `--operator-arg=--status-figures-interval=0` writes every change), messages produced/s
   (kafka), heartbeats answered/s by answer (the operator's
   groupops_operator_heartbeats_total), heartbeats the kernel dropped at either socket (full
   receive buffer, /proc/net/udp), and the generator's own counts (writes done, conflicts,
   failures, fences, replicas whose validity lapsed, PUT latency, and how late it acted itself:
   a late generator would look like late replicas);
3. crash -> plan moved: `--crashes` replicas that own partitions, one at a time, spread over the
   policies, stop being played (no renewal, heartbeat or release); the time from then until this
   driver's watch sees a plan that gives the crashed identity none of the partitions it had
   (median, p95);
4. spec changes one at a time (`--changes`), timed to the epoch moving and to the new sets;
5. with `--takeovers K` (heartbeat modes): a standby operator answering on a second port (both
   operators give the replicas both addresses; the generator sends to the one that last granted,
   gives each address its share of an exchange and follows a `not-leader` answer to the leader
   it names, as `HeartbeatClient` does), K rounds of: the fleet settled, the leader SIGKILLed
   together with one replica owning partitions; timed from the kill: the election Lease's new
   holder, heartbeats granted again to the first, 99 % and 100 % of the live replicas, the
   crashed replica's partitions moved in a plan; counted from the kill until all are granted:
   the replicas' fallback Lease writes, fences of live replicas, validity lapses, the most
   replicas invalid at once. The killed operator comes back as the next round's standby;
6. with `--handovers K` (heartbeat modes, after any takeovers): K rounds of the same with the
   leader SIGTERMed, as a rolling update of the operator stops it, and no replica crashed: a
   handover, which should cost the fleet no pause and hardly a Lease write. The old leader grants
   until it steps down, so "granted again" counts the new leader's grants (after the election
   Lease's holder changed); also when and with what status the old leader exited.

At the end it prints the figures as JSON and the RESULTS.md table (one column per mode and N).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import heapq
import http.client
import itertools
import json
import logging
import math
import os
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Any

import yaml
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from tests.e2e.kube_api import KubeApi  # noqa: E402
from tests.e2e.operator_support import (  # noqa: E402
    Kubectl,
    OperatorProcess,
    create_namespace,
    election_holder,
    free_port,
    install_crd,
)

from groupops.consumer.settings import LeaseSettings  # noqa: E402
from groupops.controller.heartbeats import receive_stamped, stamp_receipts  # noqa: E402
from groupops.controller.names import pod_name  # noqa: E402
from groupops.controller.render_pods import CONSUMER_CONTAINER  # noqa: E402
from groupops.devstack.kafka import KafkaCluster  # noqa: E402
from groupops.devstack.kube import KubeApiServer  # noqa: E402
from groupops.model import MemberId, TopicPartition  # noqa: E402
from groupops.planner.exits import incarnation_for  # noqa: E402
from groupops.planner.liveness import (  # noqa: E402
    FallbackSpread,
    Heartbeat,
    HeartbeatAnswer,
    HeartbeatFormatError,
    HeartbeatStatus,
    decode_answer,
    encode_heartbeat,
    fallback_write_may_wait,
)
from groupops.planner.plan_format import (  # noqa: E402
    LEASE_FENCED_INCARNATION_ANNOTATION,
    LEASE_LIVENESS_ANNOTATION,
    LEASE_RELEASED_THROUGH_ANNOTATION,
    POLICY_LABEL,
    LeaseRecord,
    LeaseState,
    PlanFormatError,
    PublishedPlan,
    format_micro_time,
    lease_record,
    lease_record_annotations,
    plan_from_configmap,
)
from groupops.planner.wire import LEASE_EPOCH_ANNOTATION, identity_name, lease_name  # noqa: E402
from operator_scale import (  # noqa: E402
    CLOCK_TICKS,
    PARTITIONS,
    PLAN_SUFFIX,
    REPLICAS,
    STRATEGIES,
    Observer,
    ProcessSampler,
    in_parallel,
    log_problems,
    machine_load,
    policy_manifest,
    release_namespace,
    spread,
    wait_until,
)

log = logging.getLogger("liveness_load")

MODES = ("renewal", "heartbeat", "heartbeat-thread", "heartbeat-kubelet")
KUBELET_RELIST_S = 1.0
"""A kubelet notices a container's exit within its relist period (the generic PLEG's 1 s)."""
"""heartbeat: answered in the operator's answering process (its default); heartbeat-thread: in a
thread of the operator's own process (`--no-heartbeat-process`), as before that process existed."""


class Timing:
    """The replicas' timing: `LeaseSettings()`'s defaults (interval 1 s, renew deadline 3 s, request
    timeout 2 s, duration 4 s), or what `--interval` and `--lease-duration` make of them as
    GROUPOPS_RENEW_INTERVAL_SECONDS and GROUPOPS_LEASE_DURATION_SECONDS do a real replica's."""

    def __init__(self) -> None:
        self.lease = LeaseSettings()
        self._derive()

    def configure(
        self, interval_s: float, duration_s: int, heartbeat_interval_s: float | None = None
    ) -> None:
        """As `RuntimeSettings.from_env` derives the rest from these settings."""
        self.lease = LeaseSettings(
            duration_s=duration_s,
            renew_interval_s=interval_s,
            renew_deadline_s=duration_s * 0.75,
            request_timeout_s=max(0.5, min(2.0, duration_s / 4)),
            heartbeat_interval_s=heartbeat_interval_s,
        )
        self._derive()

    def _derive(self) -> None:
        self.heartbeat_timeout_s = min(self.lease.request_timeout_s, self.lease.renew_interval_s * 0.75)
        """One exchange's budget, as `LeaseKeeper.beat_once`: how long it waits for an answer
        before writing the Lease instead; a second datagram goes at half of it
        (`HeartbeatClient._one`), and an answer to either counts."""
        self.retry_after_s = min(0.25, self.lease.renew_interval_s / 2)


TIMING = Timing()


LIST_EVERY_S = 2.0
SETTLED_FOR_S = 5.0
"""Setup is over when no plan changed for this long (and every replica acknowledged)."""
LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
PODS_PATH = "/api/v1/namespaces/{namespace}/pods"
_REPLICA_ANNOTATIONS = (
    LEASE_EPOCH_ANNOTATION,
    LEASE_RELEASED_THROUGH_ANNOTATION,
    LEASE_LIVENESS_ANNOTATION,
    LEASE_FENCED_INCARNATION_ANNOTATION,
)
"""Dropped from the stored annotations before ours are set, as `LeaseKeeper._body` does."""


# -- both processes ------------------------------------------------------------------------------


class PlanWatch(Observer):
    """operator_scale's list-then-watch loop on the namespace's ConfigMaps only (its policy
    watch is dropped): each plan ConfigMap, decoded, goes to `on_plan(policy, plan, at)`."""

    def __init__(self, kubeconfig: str, namespace: str) -> None:
        super().__init__(kubeconfig, namespace)
        self._threads = [thread for thread in self._threads if thread.name == "ConfigMap"]
        self.malformed = 0

    def on_plan(self, policy: str, published: PublishedPlan, at: float) -> None:
        raise NotImplementedError

    def _on_configmap(self, configmap: dict[str, Any], at: float) -> None:
        metadata = configmap.get("metadata") or {}
        name = str(metadata.get("name", ""))
        if not name.endswith(PLAN_SUFFIX):
            return
        try:
            published = plan_from_configmap(configmap.get("data") or {}, metadata.get("annotations"))
        except PlanFormatError:
            self.malformed += 1
            return
        self.on_plan(name.removesuffix(PLAN_SUFFIX), published, at)


def group_ids(count: int) -> dict[str, str]:
    """policy name -> group id, as operator_scale.policy_manifest names them."""
    manifests = (policy_manifest(index, "unused:9092") for index in range(count))
    return {m["metadata"]["name"]: m["spec"]["groupId"] for m in manifests}


# -- the load generator (its own process) --------------------------------------------------------


class LeanKube:
    """Just enough of the API for the hot path: one keep-alive HTTPS connection per thread, no
    client library between the request and the socket (the generator's CPU is the API server's
    loss on 2 cores). Token or client-certificate kubeconfigs."""

    def __init__(self, kubeconfig: str, *, timeout_s: float) -> None:
        config = yaml.safe_load(Path(kubeconfig).read_text())
        context = _named(config, "contexts", config["current-context"])["context"]
        cluster = _named(config, "clusters", context["cluster"])["cluster"]
        user = _named(config, "users", context["user"])["user"]
        url = urllib.parse.urlsplit(cluster["server"])
        self._host, self._port = url.hostname or "127.0.0.1", url.port or 443
        if "certificate-authority-data" in cluster:
            ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
            self._ssl = ssl.create_default_context(cadata=ca)
        else:
            self._ssl = ssl.create_default_context(cafile=cluster.get("certificate-authority"))
        self._headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if "token" in user:
            self._headers["Authorization"] = f"Bearer {user['token']}"
        elif "client-certificate-data" in user:
            keys = Path(tempfile.mkdtemp(prefix="liveness-load-"))
            (keys / "tls.crt").write_bytes(base64.b64decode(user["client-certificate-data"]))
            (keys / "tls.key").write_bytes(base64.b64decode(user["client-key-data"]))
            self._ssl.load_cert_chain(keys / "tls.crt", keys / "tls.key")
        else:
            raise ValueError(f"{kubeconfig}: the load generator knows tokens and client certificates only")
        self._timeout_s = timeout_s
        self._local = threading.local()

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body); status 0 when the request failed on the way (timeout,
        broken connection): the connection is then dropped and the next request opens one."""
        connection: http.client.HTTPSConnection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection(
                self._host, self._port, context=self._ssl, timeout=self._timeout_s
            )
            self._local.connection = connection
        try:
            payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
            headers = (
                self._headers if content_type is None else {**self._headers, "Content-Type": content_type}
            )
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            connection.close()
            self._local.connection = None
            return 0, {}
        try:
            return response.status, json.loads(raw) if raw else {}
        except ValueError:
            return response.status, {}


def _named(config: dict[str, Any], section: str, name: str) -> dict[str, Any]:
    return next(item for item in config[section] if item["name"] == name)


@dataclass(eq=False)
class Replica:
    """One replica's consumer side as the generator plays it. Guarded by the fleet's lock."""

    index: int
    policy: str
    ordinal: int
    identity: str
    lease: str
    incarnation: str
    record: LeaseRecord
    """What its next Lease write says (`LeaseKeeper._record`)."""
    written: LeaseRecord | None = None
    obj: dict[str, Any] | None = None
    """The Lease as last written or read."""
    held: bool = False
    applied: int = -1
    floor: int = -1
    crashed: bool = False
    busy: bool = False
    """A write is queued or running, or a heartbeat waits for its answer."""
    dirty: bool = False
    """The report changed while busy: act again at once when done (`kick`)."""
    token: int = 0
    valid_until: float = 0.0
    lapsed: bool = False
    exchange: list[int] = field(default_factory=list)
    """The seqs of the heartbeat exchange in flight (an answer to any of them counts)."""
    last_granted: float = 0.0
    """Wall time of its last granted heartbeat."""
    pod_uid: str | None = None
    """Mode heartbeat-kubelet: its pod's UID, named in its incarnation."""
    spread: FallbackSpread = field(default_factory=lambda: FallbackSpread(phase=random.random()))
    """Its moment within the spread of its last grant (`LeaseKeeper._spread`)."""


_TICK, _DEADLINE, _RETRY = 0, 1, 2
READ_THROUGH_IDLE_S = 0.05
"""The answer socket's read timeout: an empty read moves `_read_through` on at least this often."""
READ_THROUGH_RECHECK_S = 0.01
"""A deadline that may have an unread answer looks again this much later."""


@dataclass(frozen=True, slots=True)
class PlayConfig:
    kubeconfig: str
    namespace: str
    count: int
    mode: str
    heartbeat_address: str | None
    """One operator's host:port, or several separated by commas (a leader and its standby)."""
    write_threads: int
    interval_s: float = 1.0
    lease_duration_s: int = TIMING.lease.duration_s
    heartbeat_interval_s: float | None = None


class Fleet:
    """Every replica of the namespace, played by a scheduler thread (one heap of due actions), a
    pool of writer threads, one heartbeat receiver, the plan watch and a Lease lister that runs
    until every Lease is held."""

    def __init__(self, config: PlayConfig) -> None:
        self.config = config
        self.heartbeats = config.mode.startswith("heartbeat")
        self.kubelet_reports = config.mode == "heartbeat-kubelet"
        self.kube = LeanKube(config.kubeconfig, timeout_s=TIMING.lease.request_timeout_s)
        self.replicas: list[Replica] = []
        for policy, group_id in group_ids(config.count).items():
            for ordinal in range(REPLICAS):
                identity = identity_name(group_id, ordinal)
                incarnation = uuid.uuid4().hex
                self.replicas.append(
                    Replica(
                        index=len(self.replicas),
                        policy=policy,
                        ordinal=ordinal,
                        identity=identity,
                        lease=lease_name(policy, identity),
                        incarnation=incarnation,
                        record=LeaseRecord(
                            state=LeaseState.STARTING, incarnation=incarnation, heartbeats=self.heartbeats
                        ),
                    )
                )
        self.by_lease = {r.lease: r for r in self.replicas}
        self.by_policy: dict[str, list[Replica]] = {}
        for r in self.replicas:
            self.by_policy.setdefault(r.policy, []).append(r)
        self.latest: dict[str, PublishedPlan] = {}
        self.last_plan_change = time.time()
        self.counts: Counter[str] = Counter()
        self.put_latencies: deque[tuple[float, float]] = deque(maxlen=500_000)
        self.tick_lateness: deque[tuple[float, float]] = deque(maxlen=500_000)
        self.receive_waits: deque[tuple[float, float]] = deque(maxlen=500_000)
        """(wall time, how long an answer waited in this process's socket before it was read)."""
        self.invalid_now = 0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._order = itertools.count()
        self._seq = itertools.count(1)
        self._pending: dict[int, tuple[Replica, float, Heartbeat, bool, int]] = {}
        """seq -> (replica, send time, datagram, whether it is the exchange's second, the index of
        the address it went to)."""
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(config.write_threads, thread_name_prefix="write")
        self._socket: socket.socket | None = None
        self._targets: list[tuple[str, int]] = []
        self._preferred = 0
        """The address that last granted, fleet-wide (`HeartbeatClient` keeps one per replica)."""
        if self.heartbeats:
            assert config.heartbeat_address is not None
            for address in config.heartbeat_address.split(","):
                host, _, port = address.strip().rpartition(":")
                self._targets.append((host, int(port)))
            self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            self._socket.bind(("127.0.0.1", 0))
            self._socket.settimeout(READ_THROUGH_IDLE_S)
        self._read_through = -math.inf
        """Every answer the kernel received before this moment (monotonic) has been read: a
        deadline or a validity is judged only up to it, so that this process reading its socket
        late does not make its replicas miss answers that reached them in time (a real replica
        reads its own socket at once)."""
        fleet = self

        class Follower(PlanWatch):
            def on_plan(self, policy: str, published: PublishedPlan, at: float) -> None:
                fleet.on_plan(policy, published)

        self._plans = Follower(config.kubeconfig, config.namespace)
        self._threads = [
            threading.Thread(target=self._schedule_loop, name="schedule", daemon=True),
            threading.Thread(target=self._take_loop, name="take", daemon=True),
            threading.Thread(target=self._validity_loop, name="validity", daemon=True),
        ]
        if self._socket is not None:
            self._threads.append(threading.Thread(target=self._receive_loop, name="receive", daemon=True))

    # -- control -------------------------------------------------------------------------------------

    def _count(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    def start(self) -> None:
        self._plans.start()
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._plans.stop()
        with self._wake:
            self._wake.notify_all()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def crash(self, policy: str, ordinal: int) -> dict[str, Any]:
        """Stop playing one replica from now on: no renewal, heartbeat, acknowledgement or release."""
        r = self.by_policy[policy][ordinal]
        with self._lock:
            r.crashed = True
            r.token += 1
            at = time.time()
            reply = {"at": at, "identity": r.identity, "in_flight": r.busy, "applied": r.applied}
        if self.kubelet_reports:
            timer = threading.Timer(random.uniform(0, KUBELET_RELIST_S), self._report_exit, (r, at))
            timer.daemon = True
            timer.start()
        return reply

    def _report_exit(self, r: Replica, ended: float) -> None:
        """What the pod's kubelet writes once it noticed the exit: the container waits to restart,
        its last instance ended at `ended` (status times in whole seconds, as the API keeps them)."""

        def stamp(seconds: float) -> str:
            return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))

        terminated = {
            "exitCode": 137,
            "reason": "Error",
            "startedAt": stamp(ended - 600),
            "finishedAt": stamp(ended),
        }
        status = {
            "containerStatuses": [
                {
                    "name": CONSUMER_CONTAINER,
                    "ready": False,
                    "restartCount": 1,
                    "image": "groupops",
                    "imageID": "",
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": terminated},
                }
            ]
        }
        path = f"{PODS_PATH.format(namespace=self.config.namespace)}/{pod_name(r.policy, r.ordinal)}/status"
        code, _ = self.kube.request(
            "PATCH", path, {"status": status}, content_type="application/merge-patch+json"
        )
        self._count("kubelet_reports" if code == 200 else "kubelet_report_failures")

    def stats(self, since: float, granted_after: float | None = None) -> dict[str, Any]:
        """The fleet's figures; `granted_after` (wall time) adds how many live replicas holding
        their Lease have had a heartbeat granted since then."""
        with self._lock:
            live = [r for r in self.replicas if not r.crashed]
            granted = (
                None
                if granted_after is None
                else sum(1 for r in live if r.held and r.last_granted >= granted_after)
            )
            acked = sum(
                1
                for r in live
                if r.written is not None
                and (plan := self.latest.get(r.policy)) is not None
                and r.written.acked_epoch == plan.epoch
            )
            counts = dict(self.counts)
            held = sum(1 for r in live if r.held)
            last_plan_change = self.last_plan_change
            invalid = self.invalid_now
        latencies = [latency for at, latency in list(self.put_latencies) if at >= since]
        lateness = [late for at, late in list(self.tick_lateness) if at >= since]
        receive_waits = [wait for at, wait in list(self.receive_waits) if at >= since]
        return {
            "now": time.time(),
            "udp_port": None if self._socket is None else self._socket.getsockname()[1],
            "replicas": len(self.replicas),
            "crashed": len(self.replicas) - len(live),
            "held": held,
            "acked_newest": acked,
            "invalid_now": invalid,
            "granted_after": granted,
            "last_plan_change": last_plan_change,
            "counts": counts,
            "put_latency_ms": _milliseconds(latencies),
            "tick_lateness_ms": _milliseconds(lateness),
            "receive_wait_ms": _milliseconds(receive_waits),
        }

    # -- plans ---------------------------------------------------------------------------------------

    def on_plan(self, policy: str, published: PublishedPlan) -> None:
        with self._wake:
            known = self.latest.get(policy)
            if known is not None and known.epoch >= published.epoch:
                return
            self.latest[policy] = published
            self.last_plan_change = time.time()
            now = time.monotonic()
            for r in self.by_policy.get(policy, ()):
                if r.crashed or not r.held:
                    continue
                self._apply_newest(r)
                if r.dirty and not r.busy:
                    r.dirty = False
                    self._schedule(r, now)
            self._wake.notify()

    def _apply_newest(self, r: Replica) -> None:
        """Apply the newest plan above what it applied and its floor, as `_apply` does: the
        report says that epoch, its set in it, active; the write goes out at once (`kick`)."""
        plan = self.latest.get(r.policy)
        if not r.held or plan is None or plan.epoch <= max(r.applied, r.floor):
            return
        mine = plan.plan.assignment.get(MemberId(r.identity), ())
        r.applied = plan.epoch
        r.record = LeaseRecord(
            acked_epoch=plan.epoch,
            partitions=tuple(sorted(mine)),
            state=LeaseState.ACTIVE,
            released_through=None if r.floor < 0 else r.floor,
            incarnation=r.incarnation,
            heartbeats=self.heartbeats,
        )
        r.dirty = True
        self.counts["plans_applied"] += 1

    # -- scheduling ----------------------------------------------------------------------------------

    def _schedule(self, r: Replica, at: float) -> None:
        """Under the lock: the replica's next liveness action at `at` (replaces any other)."""
        r.token += 1
        heapq.heappush(self._heap, (at, next(self._order), _TICK, r.index, r.token))

    def _finish(self, r: Replica, end: float, *, next_at: float | None = None) -> None:
        """Under the lock: the action that kept `r` busy is over; the next one in an interval
        (at once when its report changed meanwhile)."""
        r.busy = False
        if r.crashed:
            return
        self._apply_newest(r)
        if r.dirty:
            r.dirty = False
            self._schedule(r, end)
        else:
            self._schedule(r, end + TIMING.lease.renew_interval_s if next_at is None else next_at)
        self._wake.notify()

    def _schedule_loop(self) -> None:
        while not self._stop.is_set():
            actions: list[Callable[[], None]] = []
            with self._wake:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    due, _, kind, key, token = heapq.heappop(self._heap)
                    action = self._due(kind, key, token, now, due)
                    if action is not None:
                        actions.append(action)
                        if kind == _TICK:  # how late this process acts: its own share of any gap
                            self.tick_lateness.append((time.time(), now - due))
                if not actions:
                    self._wake.wait(min(0.5, self._heap[0][0] - now) if self._heap else 0.5)
                    continue
            for action in actions:
                action()

    def _due(self, kind: int, key: int, token: int, now: float, due: float) -> Callable[[], None] | None:
        """Under the lock: what a due heap entry means now (None: it is stale, or put back)."""
        if kind == _DEADLINE:
            pending = self._pending.get(key)
            if pending is None:
                return None  # answered in time
            r, sent, first, second, target = pending
            # Judged against the datagram's own deadline, not the entry's time: a held entry comes
            # back later, and compared with that later time it was held again and again while
            # nothing was read but the socket's timeouts (every exchange stood still whenever no
            # operator answered at all, as in an election gap).
            deadline = sent + TIMING.heartbeat_timeout_s / 2
            if self._read_through < deadline:  # an answer in time may still be unread: look again
                # The reader is about this far behind: look again once it may have caught up.
                again_at = now + min(0.5, max(READ_THROUGH_RECHECK_S, deadline - self._read_through))
                heapq.heappush(self._heap, (again_at, next(self._order), kind, key, token))
                self.counts["deadlines_held_for_unread_answers"] += 1
                return None
            if not second:  # half the budget gone: a second datagram, as the client sends
                # With several addresses the client gives each its share of the budget: the
                # second datagram goes to the next one (a dead leader's share is spent).
                target = (target + 1) % len(self._targets)
                seq = next(self._seq)
                again = replace(first, seq=seq)
                self._pending[seq] = (r, now, again, True, target)
                r.exchange.append(seq)
                heapq.heappush(
                    self._heap, (now + TIMING.heartbeat_timeout_s / 2, next(self._order), _DEADLINE, seq, 0)
                )
                self.counts["heartbeats_resent"] += 1
                return lambda: self._send(again, target)
            self._close_exchange(r)
            self.counts["heartbeats_unanswered"] += 1
            return self._no_leader_answered(r, now)
        r = self.replicas[key]
        if token != r.token or r.crashed:
            return None
        if kind == _RETRY:
            return lambda: self._submit(r, retry=False)
        if not r.held or r.busy:
            return None
        r.busy = True
        if self.heartbeats and r.written == r.record:
            seq = next(self._seq)
            plan = self.latest.get(r.policy)
            heartbeat = Heartbeat(
                namespace=self.config.namespace,
                lease=r.lease,
                incarnation=r.incarnation,
                seq=seq,
                seen=-1 if plan is None else plan.epoch,
            )
            target = self._preferred
            self._pending[seq] = (r, now, heartbeat, False, target)
            r.exchange = [seq]
            heapq.heappush(
                self._heap, (now + TIMING.heartbeat_timeout_s / 2, next(self._order), _DEADLINE, seq, 0)
            )
            return lambda: self._send(heartbeat, target)
        return lambda: self._submit(r)

    def _close_exchange(self, r: Replica) -> None:
        """Under the lock: the exchange is over; no answer to its datagrams counts any more."""
        for seq in r.exchange:
            self._pending.pop(seq, None)
        r.exchange = []

    def _submit(self, r: Replica, *, retry: bool = True) -> None:
        with contextlib.suppress(RuntimeError):  # the pool is shut down: the run is over
            self._pool.submit(self._write_job, r, retry)

    # -- heartbeats ----------------------------------------------------------------------------------

    def _send(self, heartbeat: Heartbeat, target: int) -> None:
        assert self._socket is not None
        try:
            self._socket.sendto(encode_heartbeat(heartbeat), self._targets[target])
        except OSError:
            self._count("heartbeat_send_errors")  # the deadline falls back to a write
            return
        self._count("heartbeats_sent")

    def _receive_loop(self) -> None:
        assert self._socket is not None
        stamped = stamp_receipts(self._socket)
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if stamped:
                    data, _, received_at = receive_stamped(self._socket, 2048)
                else:
                    (data, _), received_at = self._socket.recvfrom(2048), None
            except TimeoutError:
                with self._wake:  # nothing was waiting when the read began
                    self._read_through = max(self._read_through, started)
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            at = time.monotonic()
            if received_at is not None:  # how late this process reads its answers: its own share
                read_at = time.time()
                waited = max(0.0, read_at - received_at)
                self.receive_waits.append((read_at, waited))
                at -= waited  # when it reached the replica's socket
            try:
                answer = decode_answer(data)
            except HeartbeatFormatError:
                self._count("heartbeat_answers_malformed")
                continue
            with self._wake:
                self._read_through = max(self._read_through, at)
                pending = self._pending.get(answer.seq)
                if pending is None:
                    self.counts["heartbeat_answers_late"] += 1
                    continue
                action = self._answered(answer, at, *pending)
            if action is not None:
                action()

    def _answered(
        self,
        answer: HeartbeatAnswer,
        at: float,
        r: Replica,
        sent: float,
        heartbeat: Heartbeat,
        second: bool,
        target: int,
    ) -> Callable[[], None] | None:
        """Under the lock: what an answer to one of the exchange's datagrams means; the action
        to take outside the lock."""
        if answer.status is HeartbeatStatus.GRANTED:
            self._close_exchange(r)
            self.counts["heartbeats_granted"] += 1
            self._preferred = target
            r.last_granted = time.time()
            r.valid_until = max(r.valid_until, sent + min(answer.valid, TIMING.lease.renew_deadline_s))
            r.spread.granted(answer.spread)
            # `LeaseKeeper._run`: only a grant earns the steady heartbeat interval.
            self._finish(r, at, next_at=at + TIMING.lease.beat_interval_s)
            return None
        leader = self._leader_target(answer.leader)
        if answer.status is HeartbeatStatus.NOT_LEADER:
            self.counts["heartbeats_not_leader"] += 1
            if leader is not None and leader != target and not r.crashed:
                # `HeartbeatClient.exchange`: the leader it names is tried next, within the same
                # exchange (whose deadline stands: the first datagram's entry keeps it).
                self._preferred = leader
                seq = next(self._seq)
                again = replace(heartbeat, seq=seq)
                self._pending[seq] = (r, at, again, True, leader)
                r.exchange.append(seq)
                return lambda: self._send(again, leader)
        self._close_exchange(r)
        if answer.status is not HeartbeatStatus.REFUSED:
            return self._no_leader_answered(r, at)  # not-leader, and no other leader to try
        if r.crashed:
            r.busy = False
            return None
        self.counts["heartbeats_refused"] += 1
        self.counts[f"refused: {' '.join(answer.reason.split()[:4])}"] += 1
        return lambda: self._submit(r)  # a fence shows as the write's conflict

    def _no_leader_answered(self, r: Replica, now: float) -> Callable[[], None] | None:
        """Under the lock: the exchange ended with no leader's answer. The Lease write, unless the
        validity covers a later one (`LeaseKeeper._fallback_may_wait`): then the next interval."""
        if r.crashed:
            r.busy = False
            return None
        if fallback_write_may_wait(
            now=now,
            valid_until=r.valid_until,
            interval_s=TIMING.lease.renew_interval_s,
            heartbeat_timeout_s=TIMING.heartbeat_timeout_s,
            write_timeout_s=TIMING.lease.request_timeout_s,
        ):
            self.counts["fallback_writes_waited"] += 1
            self._finish(r, now)
            return None
        # `LeaseKeeper._run`: the write waits for this replica's moment of the spread.
        until_write = r.spread.until_write(now)
        if until_write > 0:
            self.counts["fallback_writes_spread"] += 1
            self._finish(r, now, next_at=now + min(TIMING.lease.renew_interval_s, until_write))
            return None
        r.spread.wrote(now)
        return lambda: self._submit(r)

    def _leader_target(self, address: str | None) -> int | None:
        """The index of the address a not-leader answer names, if it is one of ours."""
        if not address:
            return None
        host, _, port = address.rpartition(":")
        with contextlib.suppress(ValueError):
            return self._targets.index((host.strip("[]"), int(port)))
        return None

    # -- Lease writes (the pool's threads) -----------------------------------------------------------

    def _write_job(self, r: Replica, retry: bool) -> None:
        ok = False
        try:
            ok = self._renew_once(r)
        except Exception:
            log.exception("writing Lease %s", r.lease)
        with self._wake:
            if not ok and retry and not r.crashed:
                # `_run`: one quick retry, so a single dropped request does not cost an interval
                heapq.heappush(
                    self._heap,
                    (time.monotonic() + TIMING.retry_after_s, next(self._order), _RETRY, r.index, r.token),
                )
                self._wake.notify()
                return
            self._finish(r, time.monotonic())

    def _renew_once(self, r: Replica) -> bool:
        """`LeaseKeeper.renew_once`: a compare-and-swap PUT; a conflict re-reads and tries once more."""
        for _ in range(2):
            with self._lock:
                if r.crashed or r.obj is None:
                    return False
                record = r.record
                body = self._body(r, record)
            sent = time.monotonic()
            status, written = self._put(r, body)
            if status == 200:
                with self._lock:
                    r.obj, r.written, r.held = written, record, True
                    r.valid_until = sent + TIMING.lease.renew_deadline_s
                return True
            if status != 409 or not self._reread(r):
                return False
        return False

    def _put(self, r: Replica, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        started = time.monotonic()
        path = f"{LEASES_PATH.format(namespace=self.config.namespace)}/{r.lease}"
        status, answer = self.kube.request("PUT", path, body)
        self.put_latencies.append((time.time(), time.monotonic() - started))
        outcome = {200: "ok", 409: "conflict", 0: "failed_no_answer"}.get(status, f"failed_{status}")
        self._count(f"lease_put_{outcome}")
        return status, answer

    def _reread(self, r: Replica) -> bool:
        """`LeaseKeeper._reread`: adopt the stored Lease; note a fence (the floor rises, nothing is
        owned any more, as the runtime's `_fence` reports). False: stop trying this round."""
        status, current = self.kube.request(
            "GET", f"{LEASES_PATH.format(namespace=self.config.namespace)}/{r.lease}"
        )
        self._count("lease_get")
        if status != 200:
            self._count(f"lease_get_failed_{status}")
            return False
        try:
            record = lease_record((current.get("metadata") or {}).get("annotations"))
        except PlanFormatError:
            self._count("lease_malformed")
            return False
        holder = (current.get("spec") or {}).get("holderIdentity")
        with self._lock:
            if record.incarnation not in (None, r.incarnation) or (holder and holder != r.identity):
                self.counts["lease_lost"] += 1
                return False
            if record.released_through is not None and record.released_through > r.floor:
                self.counts["fenced"] += 1
                log.warning("Lease %s fenced through epoch %d", r.lease, record.released_through)
                r.floor = record.released_through
                r.record = LeaseRecord(
                    acked_epoch=None if r.applied < 0 else r.applied,
                    partitions=(),
                    state=LeaseState.STARTING,
                    released_through=r.floor,
                    incarnation=r.incarnation,
                    heartbeats=self.heartbeats,
                )
            r.obj = current
        return True

    def _body(self, r: Replica, record: LeaseRecord, *, acquiring: bool = False) -> dict[str, Any]:
        """`LeaseKeeper._body`: the stored object with our fields set (under the lock)."""
        assert r.obj is not None
        metadata = dict(r.obj.get("metadata") or {})
        annotations = {
            k: v for k, v in (metadata.get("annotations") or {}).items() if k not in _REPLICA_ANNOTATIONS
        }
        annotations.update(lease_record_annotations(record, r.identity))
        metadata["annotations"] = annotations
        spec = dict(r.obj.get("spec") or {})
        now = format_micro_time(time.time())
        if acquiring:
            if spec.get("holderIdentity") != r.identity:
                spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec["acquireTime"] = now
        spec["holderIdentity"] = r.identity
        spec.setdefault("leaseDurationSeconds", TIMING.lease.duration_s)  # as the operator set it
        spec["renewTime"] = now
        return {**r.obj, "metadata": metadata, "spec": spec}

    # -- taking the Leases ---------------------------------------------------------------------------

    def _take_loop(self) -> None:
        path = f"{LEASES_PATH.format(namespace=self.config.namespace)}?labelSelector=" + urllib.parse.quote(
            POLICY_LABEL
        )
        while not self._stop.is_set():
            with self._lock:
                if all(r.held or r.crashed for r in self.replicas):
                    return
            if self.kubelet_reports:
                self._learn_pods()
            status, listing = self.kube.request("GET", path)
            self._count("lease_list")
            to_take: list[Replica] = []
            with self._lock:
                for item in listing.get("items", []) if status == 200 else []:
                    r = self.by_lease.get(str(item["metadata"]["name"]))
                    if r is None or r.held or r.busy or r.crashed:
                        continue
                    if self.kubelet_reports and r.pod_uid is None:
                        continue  # its pod is not there yet: a real replica runs in it
                    try:
                        record = lease_record(item["metadata"].get("annotations"))
                    except PlanFormatError:
                        continue
                    holder = (item.get("spec") or {}).get("holderIdentity")
                    if (
                        holder
                        and record.incarnation != r.incarnation
                        and record.state is not LeaseState.RELEASED
                    ):
                        continue  # another process holds it (`_may_take`); never the case here
                    if record.released_through is not None and record.released_through > r.floor:
                        r.floor = record.released_through
                    r.obj, r.busy = item, True
                    to_take.append(r)
            for r in to_take:
                self._pool.submit(self._take_job, r)
            self._stop.wait(LIST_EVERY_S)

    def _learn_pods(self) -> None:
        """Mode heartbeat-kubelet: each replica's pod UID, and its incarnation naming it."""
        selector = urllib.parse.quote(POLICY_LABEL)
        status, listing = self.kube.request(
            "GET", f"{PODS_PATH.format(namespace=self.config.namespace)}?labelSelector={selector}"
        )
        self._count("pod_list")
        uids = (
            {str(p["metadata"]["name"]): str(p["metadata"]["uid"]) for p in listing.get("items", [])}
            if status == 200
            else {}
        )
        with self._lock:
            for r in self.replicas:
                uid = uids.get(pod_name(r.policy, r.ordinal))
                if r.pod_uid is None and uid is not None and not r.held:
                    r.pod_uid = uid
                    r.incarnation = incarnation_for(uid)
                    r.record = replace(r.record, incarnation=r.incarnation)

    def _take_job(self, r: Replica) -> None:
        """`LeaseKeeper._take`: a conflict is left to the next listing."""
        with self._lock:
            record = r.record
            body = self._body(r, record, acquiring=True)
        sent = time.monotonic()
        status, written = self._put(r, body)
        with self._wake:
            if status != 200:
                r.busy = False
                return
            self.counts["takes"] += 1
            r.obj, r.written, r.held = written, record, True
            r.valid_until = sent + TIMING.lease.renew_deadline_s
            # Real replicas start at random moments: spread their seconds.
            self._finish(r, time.monotonic(), next_at=time.monotonic() + random.uniform(0, 1))

    # -- validity ------------------------------------------------------------------------------------

    def _validity_loop(self) -> None:
        """Counts replicas whose validity ran out (a real one stops consuming then: `valid()`)."""
        while not self._stop.wait(0.5):
            with self._lock:
                now, invalid = time.monotonic(), 0
                if self.heartbeats:  # a grant read late reached the replica in time
                    now = min(now, self._read_through)
                for r in self.replicas:
                    if r.crashed or not r.held:
                        continue
                    if now >= r.valid_until:
                        invalid += 1
                        if not r.lapsed:
                            r.lapsed = True
                            self.counts["validity_lapses"] += 1
                    else:
                        r.lapsed = False
                self.invalid_now = invalid


def _milliseconds(seconds: list[float]) -> dict[str, float]:
    return {k: round(v * 1000, 1) for k, v in spread(seconds).items() if k != "n"} | {"n": len(seconds)}


def serve_requests(answer: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """A child's side of `Child.call`: say it is ready, then answer each JSON line on stdin with
    one on stdout until `stop` (or stdin closes)."""
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "stop":
            return
        print(json.dumps(answer(request)), flush=True)


def play(config: PlayConfig) -> int:
    """The generator's main: requests on stdin, one JSON line each, answers on stdout."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    TIMING.configure(config.interval_s, config.lease_duration_s, config.heartbeat_interval_s)
    fleet = Fleet(config)
    fleet.start()

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        if request["op"] == "stats":
            granted_after = request.get("granted_after")
            return fleet.stats(
                float(request.get("since", 0.0)),
                None if granted_after is None else float(granted_after),
            )
        if request["op"] == "crash":
            return fleet.crash(request["policy"], int(request["ordinal"]))
        return {"error": f"unknown op {request['op']!r}"}

    serve_requests(answer)
    fleet.stop()
    print(json.dumps({"stopped": True}), flush=True)
    return 0


# -- the producer of `--lag-source kafka` (its own process) --------------------------------------

LAG_SOURCES = ("static", "kafka")
BUSY_VALUE = b"busy"
"""Every message's value: the size of the messages does not matter to a lag read, their count does."""
PRODUCE_BATCHES_PER_S = 100
"""The producer sends its messages in this many batches a second: each partition's offsets move
evenly, so every lag read finds them moved, whatever the tick's phase."""


def busy_topic(number: int) -> str:
    return f"busy-{number:04d}"


@dataclass(frozen=True, slots=True)
class LagSetup:
    """Where the policies read their lag. `static`: operator_scale's fixed lags, each policy its
    own topic and no broker (every policy settles). `kafka`: policy i reads topic
    `busy-<i mod topics>` on `bootstrap`, where the producer moves its offsets all the time."""

    source: str = "static"
    bootstrap: str = "127.0.0.1:9092"
    """static: never dialled (a static lag reads nothing), only validated."""
    topics: int = 0
    strategies: tuple[str, ...] = STRATEGIES
    """Policy i's strategy is `strategies[i mod len]`."""

    def strategy(self, index: int) -> str:
        return self.strategies[index % len(self.strategies)]

    def topic(self, index: int) -> str:
        return f"topic-{index:04d}" if self.source == "static" else busy_topic(index % self.topics)

    def manifest(self, index: int) -> dict[str, Any]:
        if self.source == "static":
            return policy_manifest(index, self.bootstrap, strategies=self.strategies)
        return policy_manifest(
            index,
            self.bootstrap,
            topic=self.topic(index),
            lag_source={"type": "kafka"},
            strategies=self.strategies,
        )


@dataclass(frozen=True, slots=True)
class ProduceConfig:
    bootstrap: str
    topics: list[str]
    partitions: int
    rate: float
    """Messages a second over all partitions."""


def produce(config: ProduceConfig) -> int:
    """The producer's main: `config.rate` messages a second, round-robin over every partition of
    every topic, until told to stop; requests on stdin as `play` takes them (stats, stop)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    producer = Producer({"bootstrap.servers": config.bootstrap, "linger.ms": 5, "logger": log})
    producer.list_topics(timeout=30)  # connected before it says it is ready
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    stopping = threading.Event()

    def delivered(error: KafkaError | None, _: Message) -> None:
        with lock:
            counts["delivered" if error is None else "failed"] += 1

    def run() -> None:
        targets = itertools.cycle([(t, p) for t in config.topics for p in range(config.partitions)])
        started, sent = time.monotonic(), 0
        while not stopping.wait(1 / PRODUCE_BATCHES_PER_S):
            due = int((time.monotonic() - started) * config.rate)
            batch = 0
            while sent + batch < due:
                topic, partition = next(targets)
                try:
                    producer.produce(topic, BUSY_VALUE, partition=partition, on_delivery=delivered)
                except BufferError:  # librdkafka's queue is full: the broker does not keep up
                    with lock:
                        counts["queue_full"] += 1
                    break
                batch += 1
            sent += batch
            with lock:
                counts["produced"] += batch
            producer.poll(0)  # the delivery callbacks

    thread = threading.Thread(target=run, name="produce", daemon=True)
    thread.start()

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        if request["op"] == "stats":
            with lock:
                return {"now": time.time(), "counts": dict(counts)}
        return {"error": f"unknown op {request['op']!r}"}

    serve_requests(answer)
    stopping.set()
    thread.join(timeout=5)
    unsent = producer.flush(15)
    with lock:
        print(json.dumps({"stopped": True, "counts": dict(counts), "unsent": unsent}), flush=True)
    return 0


# -- the driver ----------------------------------------------------------------------------------


class Child:
    """This file as a subprocess of its own (`--play`, `--produce`), so that its CPU is its own:
    `call` sends one request and waits for its answer."""

    def __init__(self, option: str, config: PlayConfig | ProduceConfig, log_path: Path) -> None:
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), option, json.dumps(asdict(config))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self._lock = threading.Lock()
        self.log_path = log_path
        self._read()

    @property
    def pid(self) -> int:
        return self.process.pid

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            stdin = self.process.stdin
            assert stdin is not None
            stdin.write(json.dumps({"op": op, **fields}) + "\n")
            stdin.flush()
            return self._read()

    def _read(self) -> dict[str, Any]:
        stdout: IO[str] | None = self.process.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise RuntimeError(
                f"{self.log_path.stem} exited (code {self.process.poll()}): see {self.log_path}"
            )
        answer: dict[str, Any] = json.loads(line)
        return answer

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.call("stop")
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self._log.close()


class Generator(Child):
    """The load generator (`play`)."""

    def __init__(self, config: PlayConfig, log_path: Path) -> None:
        super().__init__("--play", config, log_path)


class BusyProducer(Child):
    """The producer of `--lag-source kafka` (`produce`)."""

    def __init__(self, config: ProduceConfig, log_path: Path) -> None:
        super().__init__("--produce", config, log_path)


@dataclass
class BusyKafka:
    """What `--lag-source kafka` runs beside the fleet."""

    cluster: KafkaCluster
    producer: BusyProducer
    lags: LagSetup

    @property
    def pids(self) -> dict[str, int]:
        (broker,) = self.cluster.processes()
        return {"broker": broker.pid, "producer": self.producer.pid}


@contextmanager
def busy_kafka(
    workdir: Path, count: int, *, topics: int, rate: float, strategies: tuple[str, ...] = STRATEGIES
) -> Iterator[BusyKafka]:
    """A broker under `workdir`, its `topics` busy topics, every one of the `count` policies'
    groups committed on its topic, and the producer writing `rate` messages a second; all
    stopped on the way out."""
    cluster = KafkaCluster(workdir)
    cluster.start()  # stops what it started when it fails
    try:
        print(f"  Kafka at {cluster.bootstrap} in {cluster.start_seconds:.1f} s", flush=True)
        lags = LagSetup("kafka", cluster.bootstrap, topics, strategies)
        prepare_groups(lags, count)
        config = ProduceConfig(
            bootstrap=cluster.bootstrap,
            topics=[busy_topic(n) for n in range(topics)],
            partitions=PARTITIONS,
            rate=rate,
        )
        producer = BusyProducer(config, workdir / "producer.log")
        try:
            yield BusyKafka(cluster, producer, lags)
        finally:
            producer.stop()
    finally:
        cluster.stop()


def prepare_groups(lags: LagSetup, count: int) -> None:
    """Create the busy topics, then commit offset 0 on every partition of its topic for each
    policy's group: the topics are new, so 0 is their log start, and the group's lag is what
    was produced (without a commit the lag would follow the reset rule instead)."""
    admin = AdminClient({"bootstrap.servers": lags.bootstrap})
    topics = [busy_topic(n) for n in range(lags.topics)]
    created = admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics], request_timeout=60)
    for future in created.values():
        future.result(timeout=90)
    # The controller answers before the broker has loaded the new partitions' metadata: an
    # offset commit on a partition it does not know yet fails with UNKNOWN_TOPIC_OR_PART.
    wait_for_partitions(admin, topics, timeout=60)
    specs = [lags.manifest(index)["spec"] for index in range(count)]
    for start in range(0, count, 100):  # one group a request (the client's limit), 100 at once
        futures = [
            future
            for spec in specs[start : start + 100]
            for future in admin.alter_consumer_group_offsets(
                [
                    ConsumerGroupTopicPartitions(
                        spec["groupId"], [KafkaPartition(spec["topics"][0], p, 0) for p in range(PARTITIONS)]
                    )
                ],
                request_timeout=60,
            ).values()
        ]
        for future in futures:
            future.result(timeout=90)
    print(f"  {len(topics)} topics of {PARTITIONS} partitions, {count} groups committed at 0", flush=True)


def wait_for_partitions(admin: AdminClient, topics: list[str], *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            metadata = admin.list_topics(timeout=10).topics
        except KafkaException:
            metadata = {}
        if all(t in metadata and len(metadata[t].partitions) == PARTITIONS for t in topics):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the broker did not list the {len(topics)} busy topics within {timeout} s")
        time.sleep(0.5)


class PlanObserver(PlanWatch):
    """Every plan the driver's watch saw, per policy: (seen at, epoch, sets by identity)."""

    def __init__(self, kubeconfig: str, namespace: str) -> None:
        super().__init__(kubeconfig, namespace)
        self.plans: dict[str, list[tuple[float, int, dict[str, frozenset[TopicPartition]]]]] = {}

    def on_plan(self, policy: str, published: PublishedPlan, at: float) -> None:
        with self._lock:
            history = self.plans.setdefault(policy, [])
            if not history or history[-1][1] < published.epoch:
                sets = {str(k): frozenset(v) for k, v in published.plan.assignment.items()}
                history.append((at, published.epoch, sets))

    def newest(self, policy: str) -> tuple[float, int, dict[str, frozenset[TopicPartition]]] | None:
        with self._lock:
            history = self.plans.get(policy)
            return history[-1] if history else None

    def epoch_after(self, policy: str, after: int) -> float | None:
        """When a plan above epoch `after` was first seen."""
        with self._lock:
            for at, epoch, _ in self.plans.get(policy, []):
                if epoch > after:
                    return at
        return None

    def gives(self, policy: str, wanted: dict[str, frozenset[TopicPartition]], after: int) -> float | None:
        """When a plan above epoch `after` first gave every identity exactly its `wanted` set."""
        with self._lock:
            for at, epoch, sets in self.plans.get(policy, []):
                if epoch > after and all(
                    sets.get(identity, frozenset()) == want for identity, want in wanted.items()
                ):
                    return at
        return None

    def moved_away(
        self, policy: str, identity: str, held: frozenset[TopicPartition], after: int
    ) -> float | None:
        """When a plan above epoch `after` first gave `identity` none of `held`."""
        with self._lock:
            for at, epoch, sets in self.plans.get(policy, []):
                if epoch > after and not sets.get(identity, frozenset()) & held:
                    return at
        return None


@dataclass
class Cluster:
    kubeconfig: str
    pids: dict[str, int] = field(default_factory=dict)
    """kube-apiserver and etcd, when this script started them."""


@contextmanager
def api_cluster(workdir: Path) -> Iterator[Cluster]:
    """As operator_scale.api_server, also naming the servers' pids (their CPU is measured)."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        yield Cluster(kubeconfig)
        return
    server = KubeApiServer(workdir)
    server.start()
    try:
        assert server.apiserver is not None and server.etcd is not None
        yield Cluster(
            str(server.kubeconfig), {"kube-apiserver": server.apiserver.pid, "etcd": server.etcd.pid}
        )
    finally:
        server.stop()
        shutil.rmtree(workdir / "etcd-data", ignore_errors=True)  # the logs stay


_SAMPLE = re.compile(r"^(\w+)\{([^}]*)\}\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def samples(text: str, metric: str) -> Iterator[tuple[dict[str, str], float]]:
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match.group(1) == metric:
            yield dict(_LABEL.findall(match.group(2))), float(match.group(3))


STATUS_PATCH = "PATCH consumergrouppolicies/status"
"""The operator's status writes of the policies, as `api_requests` keys them."""


def api_requests(kubectl: Kubectl) -> dict[str, float] | None:
    """apiserver_request_total summed by "VERB resource[/subresource]" (three tries: a saturated
    API server may time a scrape out; None when all three failed)."""
    for attempt in range(3):
        try:
            result = kubectl.run("get", "--raw", "/metrics", check=False)
        except subprocess.TimeoutExpired:
            print(f"  scraping the API server's metrics timed out (try {attempt + 1})", flush=True)
            continue
        if result.returncode == 0:
            break
        print(f"  scraping the API server's metrics failed (try {attempt + 1}): {result.stderr.strip()}")
    else:
        return None
    sums: dict[str, float] = {}
    for labels, value in samples(result.stdout, "apiserver_request_total"):
        resource = labels.get("resource", "") + (
            f"/{labels['subresource']}" if labels.get("subresource") else ""
        )
        key = f"{labels.get('verb', '?')} {resource or '-'}"
        sums[key] = sums.get(key, 0.0) + value
    return sums


def machine_cpu_seconds() -> float:
    """CPU seconds every core of the machine spent busy (not idle, not waiting on I/O)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLOCK_TICKS


def udp_drops(port: int | None) -> int | None:
    """Datagrams the kernel dropped for the UDP socket bound to 127.0.0.1:`port` (its receive
    buffer was full: the reader did not keep up), from /proc/net/udp; None when not found."""
    if port is None:
        return None
    local = f"0100007F:{port:04X}"
    for line in Path("/proc/net/udp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == local:
            return int(fields[-1])
    return None


OPERATOR_RUN_COUNTERS = {
    "reconciles": "groupops_reconcile_duration_seconds_count",
    "skipped": "groupops_reconciles_skipped_total",
    "figures_held": "groupops_status_figures_held_total",
}
"""What `operator_counters` sums over every policy, besides the heartbeat answers. figures_held:
full runs whose only status change was lag figures, not written because status was written less
than the operator's --status-figures-interval ago (absent from operators without it: 0)."""


def operator_metrics_text(metrics_port: int) -> str | None:
    """The operator's /metrics exposition (None, said on stdout, when the scrape failed)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as response:
            return str(response.read().decode())
    except OSError as e:
        print(f"  scraping the operator's metrics failed: {e}", flush=True)
        return None


def operator_counters(metrics_port: int) -> dict[str, float]:
    """From the operator's metrics: groupops_operator_heartbeats_total by answer, and
    OPERATOR_RUN_COUNTERS, each summed over every policy."""
    text = operator_metrics_text(metrics_port)
    if text is None:
        return {}
    sums: dict[str, float] = {}
    for labels, value in samples(text, "groupops_operator_heartbeats_total"):
        sums[labels.get("answer", "?")] = sums.get(labels.get("answer", "?"), 0.0) + value
    for key, metric in OPERATOR_RUN_COUNTERS.items():
        sums[key] = sum(value for _, value in samples(text, metric))
    return sums


_RUN_WAIT = "groupops_operator_run_wait_seconds_bucket"
WAIT_HISTOGRAMS = {
    "urgent run wait": (_RUN_WAIT, {"lane": "urgent"}),
    "urgent run wait (container)": (_RUN_WAIT, {"lane": "urgent", "cause": "container"}),
    "urgent run wait (expiry)": (_RUN_WAIT, {"lane": "urgent", "cause": "expiry"}),
    "urgent run wait (woken)": (_RUN_WAIT, {"lane": "urgent", "cause": "woken"}),
    "routine run wait": (_RUN_WAIT, {"lane": "routine"}),
    "event loop lag": ("groupops_operator_event_loop_lag_seconds_bucket", {}),
    "heartbeat report delay": ("groupops_operator_heartbeat_report_delay_seconds_bucket", {}),
    "heartbeat socket wait": ("groupops_operator_heartbeat_socket_wait_seconds_bucket", {}),
}
"""The operator's waits (docs/design.md §8.5): for a run's worker, by lane, and kopf's loop's lag."""


def operator_waits(metrics_port: int) -> dict[str, dict[float, float]]:
    """Each of WAIT_HISTOGRAMS as cumulative bucket counts {upper bound: count} ({} when the
    scrape failed or the operator does not have it)."""
    text = operator_metrics_text(metrics_port)
    if text is None:
        return {}
    found: dict[str, dict[float, float]] = {}
    for name, (metric, wanted) in WAIT_HISTOGRAMS.items():
        buckets: dict[float, float] = {}
        for labels, value in samples(text, metric):  # summed over the labels not asked for
            if all(labels.get(k) == v for k, v in wanted.items()):
                buckets[float(labels["le"])] = buckets.get(float(labels["le"]), 0.0) + value
        if buckets:
            found[name] = buckets
    return found


def policy_runs(metrics_port: int, policy: str) -> tuple[float, float] | None:
    """The policy's full runs so far and their summed seconds (groupops_reconcile_duration_seconds
    count and sum; None when the scrape failed)."""
    text = operator_metrics_text(metrics_port)
    if text is None:
        return None
    totals = []
    for suffix in ("_count", "_sum"):
        metric = f"groupops_reconcile_duration_seconds{suffix}"
        totals.append(sum(value for labels, value in samples(text, metric) if labels.get("policy") == policy))
    return totals[0], totals[1]


def wait_quantiles(before: dict[float, float], after: dict[float, float]) -> dict[str, Any]:
    """Between two scrapes of one histogram: how many, and the bucket bounds that hold the
    median, the 95th percentile and the largest (a bound, not a measured value)."""
    delta = sorted((bound, after[bound] - before.get(bound, 0.0)) for bound in after)
    count = delta[-1][1] if delta else 0.0

    def bound_of(q: float) -> float | None:
        for bound, cumulative in delta:
            if count and cumulative >= q * count:
                return bound
        return None

    return {"n": int(count), "p50_le": bound_of(0.5), "p95_le": bound_of(0.95), "max_le": bound_of(1.0)}


def per_reconcile_ms(cpu_percent: dict[str, float], reconciles_per_s: float) -> float | None:
    """CPU of the operator's main process (its answering process left out) per reconcile, ms."""
    if reconciles_per_s <= 0:
        return None
    main = cpu_percent["operator"] - cpu_percent.get("heartbeat process", 0.0)
    return round(10 * main / reconciles_per_s, 2)


def children_of(pid: int) -> list[int]:
    """The live child processes of `pid` (from /proc/<child>/stat's parent field)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid:
            found.append(int(entry.name))
    return found


@dataclass
class Point:
    """One (N, mode) run: the processes and how to read them."""

    mode: str
    count: int
    kubectl: Kubectl
    operator: OperatorProcess
    metrics_port: int
    generator: Generator
    observer: PlanObserver
    pids: dict[str, int]
    heartbeat_port: int | None
    lags: LagSetup
    producer: BusyProducer | None = None
    """With `--lag-source kafka`."""
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def replicas(self) -> int:
        return self.count * REPLICAS

    def cpu(self) -> dict[str, float]:
        """CPU seconds of each of our processes, of this driver, and of the whole machine; the
        operator's include its children (the heartbeat answering process)."""
        seconds = {name: ProcessSampler(pid).cpu_seconds() for name, pid in self.pids.items()}
        answerers = [ProcessSampler(pid).cpu_seconds() for pid in children_of(self.pids["operator"])]
        seconds["operator"] += sum(answerers)
        seconds["heartbeat process"] = sum(answerers)
        return seconds | {
            "driver": ProcessSampler(os.getpid()).cpu_seconds(),
            "machine": machine_cpu_seconds(),
        }

    def settle(self, timeout: float, key: str = "setup") -> None:
        """Until every replica holds its Lease and acknowledged its policy's newest plan, and no
        plan changed for SETTLED_FOR_S (crashed replicas are no longer counted); the figures go
        under `key`."""
        started = time.monotonic()
        reported = started
        stats = self.generator.call("stats")
        while time.monotonic() - started < timeout:
            stats = self.generator.call("stats")
            live = stats["replicas"] - stats["crashed"]
            if (
                stats["held"] == live
                and stats["acked_newest"] == live
                and stats["now"] - stats["last_plan_change"] >= SETTLED_FOR_S
            ):
                break
            if not self.operator.alive():
                raise RuntimeError(f"the operator died during setup:\n{self.operator.log_tail()}")
            if time.monotonic() - reported >= 15:
                reported = time.monotonic()
                print(
                    f"  setup {reported - started:.0f} s: {stats['held']} held, {stats['acked_newest']} "
                    f"acknowledged the newest plan of {self.replicas}",
                    flush=True,
                )
            time.sleep(2.0)
        live = stats["replicas"] - stats["crashed"]
        settled = stats["held"] == live and stats["acked_newest"] == live
        self.figures[key] = {
            "settled": settled,
            "seconds": round(time.monotonic() - started, 1),
            "held": stats["held"],
            "acked_newest": stats["acked_newest"],
            "counts": stats["counts"],
            "uptime": machine_load(),
        }
        print(f"  {key}: {json.dumps({k: v for k, v in self.figures[key].items() if k != 'counts'})}")

    def steady(self, seconds: float) -> None:
        # The scrapes are outside the CPU window (a scrape of 1,000 policies' metrics costs the
        # operator CPU); their own two requests are inside the request window.
        requests_before, requests_at = api_requests(self.kubectl), time.monotonic()
        counters_before = operator_counters(self.metrics_port)
        cpu_before, cpu_at = self.cpu(), time.monotonic()
        generator_before = self.generator.call("stats")
        produced_before = None if self.producer is None else self.producer.call("stats")
        ports = {"operator": self.heartbeat_port, "generator": generator_before["udp_port"]}
        drops_before = {name: udp_drops(port) for name, port in ports.items()}
        time.sleep(seconds)
        drops_after = {name: udp_drops(port) for name, port in ports.items()}
        generator_after = self.generator.call("stats", since=generator_before["now"])
        produced_after = None if self.producer is None else self.producer.call("stats")
        cpu_after, cpu_elapsed = self.cpu(), time.monotonic() - cpu_at
        counters_after = operator_counters(self.metrics_port)
        requests_after, requests_elapsed = api_requests(self.kubectl), time.monotonic() - requests_at
        generator_elapsed = generator_after["now"] - generator_before["now"]

        def rates(after: dict[str, float], before: dict[str, float], elapsed: float) -> dict[str, float]:
            diffs = {k: (v - before.get(k, 0.0)) / elapsed for k, v in after.items()}
            return {k: round(v, 2) for k, v in sorted(diffs.items(), key=lambda kv: -kv[1]) if v > 0}

        api: dict[str, float] | None = None
        if requests_before is not None and requests_after is not None:
            api = {
                k: v
                for k, v in rates(requests_after, requests_before, requests_elapsed).items()
                if "WATCH" not in k
            }
        lease_puts = None if api is None else api.get("PUT leases", 0.0)
        generated = rates(generator_after["counts"], generator_before["counts"], generator_elapsed)
        replica_writes = generated.get("lease_put_ok", 0.0)
        cpu_percent = {
            name: round(100 * (cpu_after[name] - cpu_before[name]) / cpu_elapsed, 1) for name in cpu_after
        }
        counted = rates(counters_after, counters_before, requests_elapsed)
        produced: dict[str, float] | None = None
        if produced_before is not None and produced_after is not None:
            produced = rates(
                produced_after["counts"],
                produced_before["counts"],
                produced_after["now"] - produced_before["now"],
            )
        self.figures["steady"] = {
            "window_s": round(requests_elapsed, 1),
            "api_requests_per_s_besides_watch": None if api is None else round(sum(api.values()), 1),
            "api_requests_per_s": api,
            "lease_puts_per_s": lease_puts,
            "lease_puts_percent": None if lease_puts is None else round(100 * lease_puts / self.replicas, 2),
            "status_patches_per_s": None if api is None else api.get(STATUS_PATCH, 0.0),
            "replica_lease_writes_per_s": replica_writes,
            "replica_lease_writes_percent": round(100 * replica_writes / self.replicas, 2),
            "generator_window_s": round(generator_elapsed, 1),
            "cpu_percent_of_one_core": cpu_percent
            | {
                "others": round(
                    cpu_percent["machine"]
                    - sum(v for k, v in cpu_percent.items() if k not in {"machine", "heartbeat process"}),
                    1,
                )
            },
            "heartbeat_answers_per_s": {k: v for k, v in counted.items() if k not in OPERATOR_RUN_COUNTERS},
            "reconciles_per_s": counted.get("reconciles", 0.0),
            "skipped_ticks_per_s": counted.get("skipped", 0.0),
            "status_figures_held_per_s": counted.get("figures_held", 0.0),
            "operator_main_cpu_ms_per_reconcile": per_reconcile_ms(cpu_percent, counted.get("reconciles", 0)),
            "operator_main_cpu_ms_per_tick": per_reconcile_ms(
                cpu_percent, counted.get("reconciles", 0) + counted.get("skipped", 0)
            ),
            "udp_datagrams_dropped_in_window": {
                name: None if after is None or before is None else after - before
                for (name, after), before in zip(drops_after.items(), drops_before.values(), strict=True)
                if ports[name] is not None
            },
            "generator_per_s": generated,
            "producer_per_s": produced,
            "generator_in_window": {
                k: v - generator_before["counts"].get(k, 0)
                for k, v in generator_after["counts"].items()
                if v != generator_before["counts"].get(k, 0)
            },
            "generator_put_latency_ms": generator_after["put_latency_ms"],
            "generator_tick_lateness_ms": generator_after["tick_lateness_ms"],
            "generator_receive_wait_ms": generator_after["receive_wait_ms"],
            "replicas_invalid_at_end": generator_after["invalid_now"],
            "uptime": machine_load(),
        }
        print(f"  steady: {json.dumps(self.figures['steady'])}", flush=True)

    def _crash_target(
        self, i: int, count: int, groups: dict[str, str], crashed: set[str]
    ) -> tuple[str, int, int, frozenset[TopicPartition]] | None:
        """The i-th of `count` crashes: the first policy from i/count of the way through that was
        not crashed yet and has a replica owning partitions in its newest plan (policy, ordinal,
        that plan's epoch, the partitions)."""
        start = (i * self.count) // count
        for step in range(self.count):
            policy = f"policy-{(start + step) % self.count:04d}"
            newest = self.observer.newest(policy)
            if policy in crashed or newest is None:
                continue
            _, epoch, sets = newest
            for ordinal in ((i + k) % REPLICAS for k in range(REPLICAS)):
                held = sets.get(identity_name(groups[policy], ordinal), frozenset())
                if held:
                    return policy, ordinal, epoch, held
        return None

    def crashes(self, count: int, timeout: float) -> None:
        """Crash `count` replicas one at a time, spread over the policies; time each until its
        partitions have left its set in a published plan."""
        groups = group_ids(self.count)
        results: list[dict[str, Any]] = []
        crashed: set[str] = set()
        for i in range(count):
            target = self._crash_target(i, count, groups, crashed)
            if target is None:
                results.append({"skipped": "no replica owns partitions in any plan seen"})
                continue
            policy, ordinal, epoch, held = target
            crashed.add(policy)
            identity = identity_name(groups[policy], ordinal)
            runs_before = policy_runs(self.metrics_port, policy)
            reply = self.generator.call("crash", policy=policy, ordinal=ordinal)
            crashed_at = float(reply["at"])
            moved_at = None
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                moved_at = self.observer.moved_away(policy, identity, held, epoch)
                if moved_at is not None:
                    break
                time.sleep(0.05)
            seconds = None if moved_at is None else round(moved_at - crashed_at, 2)
            runs_after = policy_runs(self.metrics_port, policy)
            # The policy's full runs from the crash to the move (or the timeout): how many, and
            # how long they took together (a run that started at once and still ran late).
            runs = (
                None
                if runs_before is None or runs_after is None
                else {
                    "n": int(runs_after[0] - runs_before[0]),
                    "seconds": round(runs_after[1] - runs_before[1], 2),
                }
            )
            results.append(
                {
                    "policy": policy,
                    "identity": identity,
                    "owned": len(held),
                    "in_flight": reply["in_flight"],
                    "seconds": seconds,
                    "runs": runs,
                }
            )
            print(
                f"  crash {i + 1}/{count}: {identity} ({len(held)} partitions) -> plan moved after "
                f"{seconds} s; the policy's runs meanwhile: {runs}",
                flush=True,
            )
            time.sleep(2.0)  # the survivors acknowledge before the next crash
        times = [r["seconds"] for r in results if r.get("seconds") is not None]
        self.figures["crash_to_plan"] = {
            "seconds": {k: round(v, 2) for k, v in spread(times).items()},
            "not_moved_within_s": {
                "timeout": timeout,
                "count": sum(1 for r in results if "identity" in r and r["seconds"] is None),
            },
            "each": results,
            "uptime": machine_load(),
        }

    def takeovers(
        self, count: int, standby: OperatorProcess, timeout: float, *, graceful: bool = False
    ) -> None:
        """Leader takeover under load, `count` times: with a standby operator running (started
        here, standing by, its caches synced), SIGKILL the leader and, at the same moment, crash
        one replica that owns partitions (as a node lost with both would); with `graceful`,
        SIGTERM the leader instead, as a rolling update of the operator does, and crash no
        replica (a handover: nothing should pause). Timed from the kill:
        the election Lease's holder changing (takeover), the first and then 99 % and 100 % of
        the live replicas granted a heartbeat again (by the new leader: the old one is dead), and
        the crashed replica's partitions leaving its set in a published plan. Counted between
        the kill and 100 % granted: the replicas' fallback Lease writes (what §8.5's "the fallback
        is all at once" costs the API server), fences of live replicas, validity lapses (a real
        replica pauses consuming then) and the most replicas invalid at once. The killed
        operator is then started again as the standby, the fleet settles, and the next round
        kills the new leader."""
        groups = group_ids(self.count)
        crashed = {r.get("policy") for r in self.figures.get("crash_to_plan", {}).get("each", [])}
        api = KubeApi(self.kubectl.kubeconfig)
        leader = self.operator
        results: list[dict[str, Any]] = []
        try:
            for i in range(count):
                if not standby.alive():
                    standby.start()  # a standby does not start kopf: no `wait_started`
                wait_until("the standby to stand by", standby.stands_by, 60, standby)
                self.settle(timeout * 4, key=f"settle_before_takeover_{i + 1}")
                target = None if graceful else self._crash_target(i, count, groups, crashed)
                assert graceful or target is not None, "no replica owns partitions"
                deposed = election_holder(api, self.observer.namespace)
                before = self.generator.call("stats")
                killed_wall, killed = time.time(), time.monotonic()
                exited: dict[str, Any] = {}
                if graceful:
                    assert leader.process is not None
                    leader.process.send_signal(signal.SIGTERM)
                    exited = reaped_in_background(leader.process, since=killed)
                else:
                    leader.kill()
                if target is not None:
                    policy, ordinal, epoch, held = target
                    crashed.add(policy)
                    identity = identity_name(groups[policy], ordinal)
                    self.generator.call("crash", policy=policy, ordinal=ordinal)
                result = self._after_kill(api, deposed, killed_wall, killed, timeout, graceful=graceful)
                if target is not None:
                    moved_at = None
                    while moved_at is None and time.monotonic() - killed < timeout:
                        moved_at = self.observer.moved_away(policy, identity, held, epoch)
                        if moved_at is None:
                            time.sleep(0.05)
                    result["crash_to_plan_s"] = None if moved_at is None else round(moved_at - killed_wall, 2)
                    result |= {"identity": identity, "owned": len(held)}
                else:
                    assert leader.process is not None
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        leader.process.wait(timeout=30)  # its own shutdown: a second SIGTERM would kill it
                    leader.stop()  # reaps it (SIGKILL after 20 s more)
                    result["old_leader_exit_s"], result["old_leader_exit_code"] = (
                        exited.get("s"),
                        exited.get("code"),
                    )
                # The window ends when every live replica was granted again (else now).
                counts = result.pop("counts_at_all_granted", None) or self.generator.call("stats")["counts"]
                result["in_window"] = {
                    k: v - before["counts"].get(k, 0)
                    for k, v in counts.items()
                    if v != before["counts"].get(k, 0) and k.startswith(TAKEOVER_COUNTS)
                }
                result["fallback_lease_puts"] = sum(
                    v for k, v in result["in_window"].items() if k.startswith("lease_put")
                )
                result["uptime"] = machine_load()
                results.append(result)
                print(f"  takeover {i + 1}/{count}: {json.dumps(result)}", flush=True)
                leader, standby = standby, leader
        finally:
            api.close()
        self.operator = leader

        def figure(key: str) -> dict[str, float]:
            values = [r[key] for r in results if r.get(key) is not None]
            return {k: round(v, 2) for k, v in spread(values).items()}

        self.figures["handover" if graceful else "takeover"] = {
            "rounds": len(results),
            **{key: figure(key) for key in (*TAKEOVER_TIMES, "crash_to_plan_s", "fallback_lease_puts")},
            "each": results,
        }

    def _after_kill(
        self,
        api: KubeApi,
        deposed: str | None,
        killed_wall: float,
        killed_at: float,
        timeout: float,
        *,
        graceful: bool = False,
    ) -> dict[str, Any]:
        """Poll the election Lease and the generator until every live replica was granted again:
        after the kill, or, `graceful` (the old leader grants on until it steps down), after the
        new leader took over."""
        result: dict[str, Any] = dict.fromkeys(TAKEOVER_TIMES)
        most_invalid = 0
        timeline: list[dict[str, Any]] = []
        sampled: dict[str, Any] | None = None
        granted_after = None if graceful else killed_wall
        while time.monotonic() - killed_at < timeout and result["all_granted_s"] is None:
            if result["takeover_s"] is None and election_holder(api, self.observer.namespace) not in (
                None,
                deposed,
            ):
                result["takeover_s"] = round(time.monotonic() - killed_at, 2)
                granted_after = granted_after or time.time()
            elapsed = round(time.monotonic() - killed_at, 2)
            stats = self.generator.call("stats", granted_after=granted_after)
            most_invalid = max(most_invalid, stats["invalid_now"])
            granted, live = stats["granted_after"] or 0, stats["held"]  # None: no new leader yet
            if result["first_granted_s"] is None and granted > 0:
                result["first_granted_s"] = elapsed
            if result["p99_granted_s"] is None and granted >= 0.99 * live:
                result["p99_granted_s"] = elapsed
            if granted >= live:
                result["all_granted_s"] = elapsed
                result["counts_at_all_granted"] = stats["counts"]
            if sampled is None or elapsed - sampled["s"] >= 1.0:
                # Once a second: how the fleet comes back (granted since the kill, invalid now)
                # and what its exchanges ended in during that second.
                counts = stats["counts"]
                previous = sampled["counts"] if sampled is not None else counts
                timeline.append(
                    {
                        "s": elapsed,
                        "granted": granted,
                        "invalid": stats["invalid_now"],
                        **{k: counts.get(k, 0) - previous.get(k, 0) for k in TIMELINE_COUNTS},
                    }
                )
                sampled = {"s": elapsed, "counts": counts}
            time.sleep(0.1)
        result["most_invalid_at_once"] = most_invalid
        result["timeline"] = timeline
        return result

    def changes(self, count: int, timeout: float) -> None:
        """Change `count` policies' strategy one at a time, spread over the fleet: `range` ones to
        `roundrobin`, which moves partitions among the same live replicas through the handoff's
        two epochs. Each is timed from the PATCH's answer until the plan's epoch moved (the first
        step published) and until a plan gives the round-robin sets (the last step, after the
        replicas acknowledged the first). Policies a crash left with fewer replicas are not
        changed."""
        groups = group_ids(self.count)
        crashed = {r.get("policy") for r in self.figures.get("crash_to_plan", {}).get("each", [])}
        ranged = [
            i
            for i in range(self.count)
            if self.lags.strategy(i) == "range" and f"policy-{i:04d}" not in crashed
        ]
        api = KubeApi(self.kubectl.kubeconfig)
        results: list[dict[str, Any]] = []
        try:
            for i in range(count):
                index = ranged[(i * len(ranged)) // count % len(ranged)]
                policy = f"policy-{index:04d}"
                newest = self.observer.newest(policy)
                if newest is None:
                    results.append({"policy": policy, "skipped": "no plan seen"})
                    continue
                epoch = newest[1]
                wanted = {
                    identity_name(groups[policy], ordinal): frozenset(
                        TopicPartition(self.lags.topic(index), p)
                        for p in range(ordinal, PARTITIONS, REPLICAS)
                    )
                    for ordinal in range(REPLICAS)
                }
                api.patch(
                    "ConsumerGroupPolicy",
                    self.observer.namespace,
                    policy,
                    {"spec": {"strategy": {"type": "roundrobin"}}},
                )
                patched_at = time.time()
                first = last = None
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline and last is None:
                    first = first or self.observer.epoch_after(policy, epoch)
                    last = self.observer.gives(policy, wanted, epoch)
                    time.sleep(0.05)
                result = {
                    "policy": policy,
                    "epoch_moved_s": None if first is None else round(first - patched_at, 2),
                    "new_sets_s": None if last is None else round(last - patched_at, 2),
                }
                results.append(result)
                print(
                    f"  change {i + 1}/{count}: {policy} range -> roundrobin: epoch moved after "
                    f"{result['epoch_moved_s']} s, round-robin sets after {result['new_sets_s']} s",
                    flush=True,
                )
                time.sleep(1.0)
        finally:
            api.close()
        self.figures["change_to_plan"] = {
            what: {
                k: round(v, 2)
                for k, v in spread([r[what] for r in results if r.get(what) is not None]).items()
            }
            for what in ("epoch_moved_s", "new_sets_s")
        } | {
            "not_done_within_s": {
                "timeout": timeout,
                "count": sum(1 for r in results if r.get("new_sets_s") is None),
            },
            "each": results,
            "uptime": machine_load(),
        }


TAKEOVER_TIMES = ("takeover_s", "first_granted_s", "p99_granted_s", "all_granted_s")
"""Seconds from the leader's SIGKILL (`Point.takeovers`)."""
TIMELINE_COUNTS = (
    "heartbeats_granted",
    "heartbeats_not_leader",
    "heartbeats_unanswered",
    "heartbeats_refused",
    "lease_put_ok",
    "fallback_writes_waited",
    "fallback_writes_spread",
    "fenced",
)
"""What a takeover's once-a-second timeline counts (`_after_kill`)."""
TAKEOVER_COUNTS = (
    "lease_put",
    "fallback_writes_waited",
    "fallback_writes_spread",
    "heartbeats_unanswered",
    "heartbeats_not_leader",
    "heartbeats_refused",
    "refused:",
    "fenced",
    "validity_lapses",
)
"""The generator's counts a takeover round reports (prefixes)."""


def point(mode: str, count: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with ExitStack() as exits:
        cluster = exits.enter_context(api_cluster(workdir / f"kube-{count}-{mode}"))
        kubectl = Kubectl(cluster.kubeconfig)
        install_crd(kubectl)
        namespace = f"live-{mode[:5]}-{count}-{int(time.time()) % 100000}"
        create_namespace(kubectl, namespace)
        print(f"== {count} policies, {mode} mode, namespace {namespace}; {machine_load()}", flush=True)
        lags, busy = LagSetup(strategies=tuple(args.strategies)), None
        if args.lag_source == "kafka":
            busy = exits.enter_context(
                busy_kafka(
                    workdir / f"kafka-{count}-{mode}",
                    count,
                    topics=args.busy_topics or max(1, count // 10),
                    rate=args.produce_rate,
                    strategies=tuple(args.strategies),
                )
            )
            lags = busy.lags
        metrics_port = free_port()
        extra = [
            "--metrics-port",
            str(metrics_port),
            "--lease-duration",
            str(args.lease_duration),
            *args.operator_arg,
        ]
        heartbeat_address, heartbeat_port, standby = None, None, None
        if mode.startswith("heartbeat"):
            # With --takeovers a standby answers on a port of its own; both operators render the
            # same pods (both addresses), as the chart's replicas do.
            ports = [
                free_port(socket.SOCK_DGRAM) for _ in range(2 if args.takeovers or args.handovers else 1)
            ]
            heartbeat_port = ports[0]
            heartbeat_address = ",".join(f"127.0.0.1:{port}" for port in ports)
            addresses = [arg for port in ports for arg in ("--heartbeat-address", f"127.0.0.1:{port}")]
            extra += ["--heartbeat-port", str(heartbeat_port), *addresses]
            if args.heartbeat_interval is not None:
                extra += ["--heartbeat-interval", str(args.heartbeat_interval)]
            if mode == "heartbeat-thread":
                extra.append("--no-heartbeat-process")
            if args.takeovers or args.handovers:
                standby = OperatorProcess(
                    kubeconfig=cluster.kubeconfig,
                    namespace=namespace,
                    log_path=workdir / f"operator-{count}-{mode}-standby.log",
                    extra=[*extra, "--metrics-port", str(free_port()), "--heartbeat-port", str(ports[1])],
                    tick=None,
                    heartbeats=False,
                )
                exits.callback(standby.stop)
        operator = OperatorProcess(
            kubeconfig=cluster.kubeconfig,
            namespace=namespace,
            log_path=workdir / f"operator-{count}-{mode}.log",
            extra=extra,
            tick=None,
            heartbeats=False,  # heartbeat mode passes its own flags above
        )
        if os.environ.get("KUBECONFIG"):
            exits.callback(release_namespace, cluster.kubeconfig, kubectl, namespace, count)
        operator.start()
        exits.callback(operator.stop)
        operator.wait_started()
        wait_until("the operator to lead", operator.leads, 60, operator)
        assert operator.process is not None
        observer = PlanObserver(cluster.kubeconfig, namespace)
        observer.start()
        exits.callback(observer.stop)
        config = PlayConfig(
            kubeconfig=cluster.kubeconfig,
            namespace=namespace,
            count=count,
            mode=mode,
            heartbeat_address=heartbeat_address,
            write_threads=args.write_threads,
            interval_s=args.interval,
            lease_duration_s=args.lease_duration,
            heartbeat_interval_s=args.heartbeat_interval,
        )
        generator = Generator(config, workdir / f"generator-{count}-{mode}.log")
        exits.callback(generator.stop)
        run = Point(
            mode=mode,
            count=count,
            kubectl=kubectl,
            operator=operator,
            metrics_port=metrics_port,
            generator=generator,
            observer=observer,
            pids={
                **cluster.pids,
                "operator": operator.process.pid,
                "generator": generator.pid,
                **(busy.pids if busy is not None else {}),
            },
            heartbeat_port=heartbeat_port,
            lags=lags,
            producer=None if busy is None else busy.producer,
        )
        run.figures["lag_source"] = {
            "type": lags.source,
            "topics": lags.topics if busy is not None else count,
            "partitions_per_topic": PARTITIONS,
            "produce_rate_per_s": args.produce_rate if busy is not None else None,
            "strategies": list(lags.strategies),
        }
        run.figures["uptime_start"] = machine_load()
        started = time.monotonic()

        def create(api: KubeApi, index: int) -> None:
            api.create("ConsumerGroupPolicy", namespace, lags.manifest(index))

        in_parallel(cluster.kubeconfig, list(range(count)), create)
        run.figures["create_s"] = round(time.monotonic() - started, 1)
        print(f"  created {count} policies in {run.figures['create_s']} s", flush=True)
        run.settle(args.setup_timeout)
        waits_settled = operator_waits(run.metrics_port)
        run.steady(args.steady)
        waits_before = operator_waits(run.metrics_port)
        run.figures["waits_in_steady"] = {
            name: wait_quantiles(waits_settled.get(name, {}), after) for name, after in waits_before.items()
        }
        run.crashes(args.crashes, args.crash_timeout)
        run.changes(args.changes, args.crash_timeout)
        waits_after = operator_waits(run.metrics_port)
        run.figures["waits_in_crashes_and_changes"] = {
            name: wait_quantiles(waits_before.get(name, {}), after) for name, after in waits_after.items()
        }
        run.figures["generator_counts_end"] = generator.call("stats")["counts"]
        exit_code = operator.process.poll()  # an operator that lost its election has exited
        run.figures["operator_exit_code"] = exit_code
        if exit_code is None:
            run.figures["operator_rss_mib_end"] = round(ProcessSampler(operator.process.pid).rss_mib(), 1)
        run.figures["operator_log"] = log_problems(operator.log_path)
        if standby is not None:
            run.takeovers(args.takeovers, standby, args.takeover_timeout)
            if args.handovers:
                other = standby if run.operator is operator else operator
                run.takeovers(args.handovers, other, args.takeover_timeout, graceful=True)
            run.figures["takeover_logs"] = {
                "first": log_problems(operator.log_path),
                "second": log_problems(standby.log_path),
            }
        run.figures["observer_relists"] = observer.relists
        run.figures["uptime_end"] = machine_load()
        return run.figures


def reaped_in_background(process: subprocess.Popen[bytes], *, since: float) -> dict[str, Any]:
    """Wait for `process` in a thread; the dict gets its exit `code` and the seconds from `since`
    (monotonic) to its exit, `s`, once it exited."""
    exited: dict[str, Any] = {}

    def reap() -> None:
        code = process.wait()
        exited.update(code=code, s=round(time.monotonic() - since, 2))

    threading.Thread(target=reap, name="reaper", daemon=True).start()
    return exited


def markdown_table(figures: dict[str, dict[str, Any]]) -> str:
    """The RESULTS.md table: one row per measure, one column per (mode, N)."""

    def waits(f: dict[str, Any], name: str) -> str:
        found = (f.get("waits_in_crashes_and_changes") or {}).get(name)
        if not found or not found["n"]:
            return "n/a"
        return f"<= {found['p50_le']} / {found['p95_le']} / {found['max_le']} s (n={found['n']})"

    def setup(f: dict[str, Any]) -> str:
        done = f["setup"]
        return f"{done['seconds']} s" + (
            "" if done["settled"] else f" (NOT settled: {done['acked_newest']} acked)"
        )

    def api_top(f: dict[str, Any]) -> str:
        return ", ".join(f"{k} {v}" for k, v in list(f["steady"]["api_requests_per_s"].items())[:4])

    def window(*prefixes: str) -> Callable[[dict[str, Any]], str]:
        def read(f: dict[str, Any]) -> str:
            counts = f["steady"]["generator_in_window"]
            per_s = [
                sum(v for k, v in counts.items() if k.startswith(p)) / f["steady"]["generator_window_s"]
                for p in prefixes
            ]
            return " / ".join(f"{value:.1f}" for value in per_s)

        return read

    def in_window(key: str) -> Callable[[dict[str, Any]], int]:
        return lambda f: int(f["steady"]["generator_in_window"].get(key, 0))

    def spread_ms(ms: dict[str, float], keys: tuple[str, ...] = ("median", "p95", "max")) -> str:
        return " / ".join(str(ms.get(k, "n/a")) for k in keys) + f" ms (n={ms['n']})"

    def latency(f: dict[str, Any]) -> str:
        return spread_ms(f["steady"]["generator_put_latency_ms"], ("median", "p95"))

    def cpu(name: str) -> Callable[[dict[str, Any]], str]:
        return lambda f: f"{f['steady']['cpu_percent_of_one_core'][name]} %"

    def changed(what: str) -> Callable[[dict[str, Any]], str]:
        def read(f: dict[str, Any]) -> str:
            s = f["change_to_plan"][what]
            return "{median} / {p95} / {max} s (n={n})".format(**s) if s else "none"

        return read

    def crash(f: dict[str, Any]) -> str:
        s, missed = f["crash_to_plan"]["seconds"], f["crash_to_plan"]["not_moved_within_s"]["count"]
        late = f", {missed} not moved" if missed else ""
        return f"{s['median']:.2f} / {s['p95']:.2f} / {s['max']:.2f} s (n={s['n']}{late})"

    def lag_source(f: dict[str, Any]) -> str:
        source = f["lag_source"]
        if source["type"] == "static":
            return "static"
        return (
            f"kafka: {source['topics']} topics x {source['partitions_per_topic']} partitions, "
            f"{source['produce_rate_per_s']:g} msg/s"
        )

    def produced(f: dict[str, Any]) -> str:
        per_s = f["steady"]["producer_per_s"]
        return "n/a" if per_s is None else f"{per_s.get('delivered', 0.0)} / {per_s.get('failed', 0.0)}"

    rows: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
        ("lag source", lag_source),
        ("setup: every Lease taken, newest plan acknowledged", setup),
        (
            "API requests/s besides WATCH (all clients)",
            lambda f: f["steady"]["api_requests_per_s_besides_watch"],
        ),
        ("largest (verb resource requests/s)", api_top),
        ("Lease PUTs/s at the API server", lambda f: f["steady"]["lease_puts_per_s"]),
        ("... as % of replicas per second", lambda f: f"{f['steady']['lease_puts_percent']} %"),
        (
            "replicas' own Lease writes, % of replicas per second (target <= 1 %)",
            lambda f: f"{f['steady']['replica_lease_writes_percent']} %",
        ),
        (
            "replicas' Lease PUTs/s: ok / conflict / failed",
            window("lease_put_ok", "lease_put_conflict", "lease_put_failed"),
        ),
        ("replicas' Lease PUT latency median / p95", latency),
        (
            "generator's own lateness per liveness action, median / p95 / max",
            lambda f: "{median} / {p95} / {max} ms".format(**f["steady"]["generator_tick_lateness_ms"]),
        ),
        (
            "answers waiting in the generator's socket, median / p95 / max",
            lambda f: spread_ms(f["steady"]["generator_receive_wait_ms"]),
        ),
        (
            "heartbeats granted/s (operator metric)",
            lambda f: f["steady"]["heartbeat_answers_per_s"].get("granted", 0.0),
        ),
        (
            "heartbeats/s sent (second datagrams included) / second datagrams / unanswered / refused",
            window("heartbeats_sent", "heartbeats_resent", "heartbeats_unanswered", "heartbeats_refused"),
        ),
        (
            "heartbeats dropped by the kernel: at the operator / at the generator",
            lambda f: (
                " / ".join(str(v) for v in f["steady"]["udp_datagrams_dropped_in_window"].values()) or "n/a"
            ),
        ),
        ("fences of live replicas in the window", in_window("fenced")),
        ("replicas whose validity lapsed in the window", in_window("validity_lapses")),
        ("reconciles/s (the tick asks policies / 5 s)", lambda f: f["steady"]["reconciles_per_s"]),
        ("ticks skipped/s (settled policies)", lambda f: f["steady"].get("skipped_ticks_per_s", "n/a")),
        ("policy status PATCHes/s", lambda f: f["steady"]["status_patches_per_s"]),
        (
            "status writes held/s (lag figures only, written < --status-figures-interval ago)",
            lambda f: f["steady"]["status_figures_held_per_s"],
        ),
        ("messages produced/s: delivered / failed", produced),
        (
            "operator main process CPU per reconcile",
            lambda f: f"{f['steady']['operator_main_cpu_ms_per_reconcile']} ms",
        ),
        (
            "operator main process CPU per tick (reconciled or skipped)",
            lambda f: f"{f['steady'].get('operator_main_cpu_ms_per_tick', 'n/a')} ms",
        ),
        ("CPU operator (% of one core)", cpu("operator")),
        (
            "during crashes and changes: urgent run's wait for a worker, p50 / p95 / max (bucket bounds)",
            lambda f: waits(f, "urgent run wait"),
        ),
        ("... of which a container's start or end woke", lambda f: waits(f, "urgent run wait (container)")),
        (
            "... of which an expiry on the policy's clock made due",
            lambda f: waits(f, "urgent run wait (expiry)"),
        ),
        ("... of which anything else woke", lambda f: waits(f, "urgent run wait (woken)")),
        (
            "... routine run's wait for a worker, p50 / p95 / max",
            lambda f: waits(f, "routine run wait"),
        ),
        ("... kopf's event loop lag, p50 / p95 / max", lambda f: waits(f, "event loop lag")),
        (
            "operator at the end of the run",
            lambda f: (
                "running"
                if f.get("operator_exit_code") is None
                else f"exited (code {f['operator_exit_code']})"
            ),
        ),
        ("of which its heartbeat process", cpu("heartbeat process")),
        ("CPU kube-apiserver", cpu("kube-apiserver")),
        ("CPU etcd", cpu("etcd")),
        ("CPU load generator", cpu("generator")),
        ("CPU Kafka broker", cpu("broker")),
        ("CPU producer", cpu("producer")),
        (
            "CPU of the whole machine (of 200 %) / of other processes",
            lambda f: f"{cpu('machine')(f)} / {cpu('others')(f)}",
        ),
        ("crash -> plan moved: median / p95 / max", crash),
        ("spec change -> epoch moved: median / p95 / max", changed("epoch_moved_s")),
        ("spec change -> the new sets published: median / p95 / max", changed("new_sets_s")),
        (
            "load average at the end of the window",
            lambda f: f["steady"]["uptime"].split("load average:")[-1].strip(),
        ),
    ]

    def cell(column: str, read: Callable[[dict[str, Any]], Any]) -> str:
        try:
            return str(read(figures[column]))
        except (KeyError, TypeError, ZeroDivisionError):
            return "n/a"

    lines = ["| | " + " | ".join(figures) + " |", "|---|" + "---:|" * len(figures)]
    lines += [f"| {name} | " + " | ".join(cell(c, read) for c in figures) + " |" for name, read in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--counts", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--steady", type=float, default=60.0, help="steady-state window, seconds")
    parser.add_argument("--crashes", type=int, default=10, help="replicas crashed one at a time")
    parser.add_argument(
        "--changes", type=int, default=10, help="policies whose strategy changes, one at a time"
    )
    parser.add_argument("--setup-timeout", type=float, default=420.0, help="seconds to wait for setup")
    parser.add_argument("--crash-timeout", type=float, default=30.0, help="seconds to wait for each move")
    parser.add_argument(
        "--takeovers",
        type=int,
        default=0,
        help="heartbeat modes: leader takeovers (a standby started, the leader SIGKILLed with a replica)",
    )
    parser.add_argument(
        "--handovers",
        type=int,
        default=0,
        help="heartbeat modes: after the takeovers, graceful handovers (the leader SIGTERMed, as a "
        "rolling update of the operator does; no replica crashed)",
    )
    parser.add_argument(
        "--takeover-timeout", type=float, default=60.0, help="seconds to wait for each takeover's figures"
    )
    parser.add_argument("--write-threads", type=int, default=48, help="the generator's writer pool")
    parser.add_argument("--interval", type=float, default=1.0, help="replicas' renewal/heartbeat interval, s")
    parser.add_argument(
        "--lease-duration", type=int, default=TIMING.lease.duration_s, help="Lease duration, s"
    )
    parser.add_argument(
        "--heartbeat-interval",
        type=float,
        help="seconds from a granted heartbeat to the next (the operator's --heartbeat-interval); "
        "default --interval",
    )
    parser.add_argument(
        "--lag-source",
        choices=LAG_SOURCES,
        default="static",
        help="static: fixed lags, every policy settles; kafka: a broker whose offsets a producer "
        "moves all the time, every tick runs in full",
    )
    parser.add_argument(
        "--busy-topics",
        type=int,
        help="kafka: topics the policies share (default max(1, N // 10)), 12 partitions each",
    )
    parser.add_argument(
        "--produce-rate", type=float, default=2000.0, help="kafka: messages a second over all partitions"
    )
    parser.add_argument(
        "--operator-arg",
        action="append",
        default=[],
        help="one more argument for the operator(s), repeatable; a flag needs the = form: "
        "--operator-arg=--status-figures-interval=0",
    )
    parser.add_argument(
        "--strategies",
        nargs="+",
        default=list(STRATEGIES),
        help="the policies' strategies, each policy the next in turn (the default mixes the lag-driven "
        "`lag` and `balanced` with `range` and `sticky`, which plan on counts)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--play", help=argparse.SUPPRESS)
    parser.add_argument("--produce", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.busy_topics is not None and args.busy_topics < 1:
        parser.error("--busy-topics must be at least 1")
    if args.produce_rate <= 0:
        parser.error("--produce-rate must be above 0")
    TIMING.configure(args.interval, args.lease_duration, args.heartbeat_interval)
    if args.play:
        return play(PlayConfig(**json.loads(args.play)))
    if args.produce:
        return produce(ProduceConfig(**json.loads(args.produce)))
    workdir = Path(tempfile.mkdtemp(prefix="groupops-liveness-load-"))
    print(f"work directory {workdir}; {machine_load()}", flush=True)
    figures: dict[str, dict[str, Any]] = {}
    for count in args.counts:
        for mode in args.modes:
            timing = (
                ""
                if (args.interval, args.lease_duration) == (1.0, 4)
                else f" {args.interval}s/{args.lease_duration}s"
            )
            operator_args = "".join(f" {arg}" for arg in args.operator_arg)
            figures[f"{mode} {count}{timing}{operator_args}"] = point(mode, count, args, workdir)
            if args.json:
                args.json.write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))
    print(markdown_table(figures))
    print(f"done; {machine_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
