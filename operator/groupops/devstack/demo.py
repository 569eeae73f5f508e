"""`python -m groupops.devstack demo [--short]`, what `make demo` runs: groupops' main job, end to
end, on the local stack, printed for a person to follow.

Steps, in order (each prints what it does; a step that fails ends the demo with
`Error: <step>: <why>`, exit code 1, and keeps the logs):
1. stack: one Kafka broker and the API server with etcd (or the running stack given by
   --kubeconfig and --bootstrap-server); the ConsumerGroupPolicy CRD; the namespace;
2. the operator (`groupops operator --namespace demo`) and a local runner that plays the kubelet
   for its pods (devstack/kubelet.py: each pod runs as a real `groupops consume` process);
3. data: the lag policy's topic gets a skewed backlog (the example's static lags, scaled: some
   partitions far more messages than others); the failover policy's topic a steady trickle;
4. policies: examples/policies/failover.yaml and lag.yaml, pointed at the local broker and with
   lagSource kafka where the example has static lag (the real lag drives the plan);
5. `kubectl get cgp -o wide` and each plan (status.members) once both are Ready;
6. rebalance on lag: once the backlog is processed, a burst lands on the partitions of one
   replica; the operator's rebalance (its `Rebalanced` Event) gives the max member lag before and
   after, then the lag falls back to 0;
7. failover: the active replica is killed (SIGKILL); measured from the kill to the standby's
   acknowledgement of the new plan and to its first processed message (their processing
   journals carry both times);
8. everything stops (replicas, operator, Kafka, API server), also on Ctrl-C or failure.

A running stack is not cleaned: the namespace and topics stay (give a new --namespace per run).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import shutil
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import yaml
from confluent_kafka import KafkaException

from groupops.devstack.demo_examples import CRD, PolicyInfo, adapt_example, static_lags
from groupops.devstack.demo_stack import (
    Endpoints,
    Kubectl,
    OperatorRun,
    SteadyWriter,
    create_topics,
    kubectl_binary,
    local_stack,
    no_interrupts,
    produce_counts,
)
from groupops.devstack.errors import DemoError, DevstackError
from groupops.devstack.kube_api import ApiError, KubeApi
from groupops.devstack.kubelet import Kubelet
from groupops.planner.target import Trigger

__all__ = ["FULL", "SCENARIOS", "SHORT", "Scenario", "main"]

T = TypeVar("T")

PROCESSOR = "groupops.consumer.processors:sleep_1ms"
"""Every replica pretends to work a millisecond per message, so that lag builds and drains at a
pace a person can follow (about 1,000 messages per second per replica)."""
_LAG_TRIGGERS = frozenset(
    {Trigger.IMBALANCE.value, Trigger.TIME_LAG_ABOVE_GOAL.value, Trigger.INTERVAL.value}
)
"""The replans a burst of lag can cause (groupops.planner.target.Trigger)."""
_REBALANCED = re.compile(
    r"epoch (?P<epoch>\d+) \((?P<trigger>[^)]*)\): (?P<moves>\d+) moves, "
    r"max member lag (?P<after>[\d,]+) \(was (?P<before>[\d,]+|-)\)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """backlog_scale: messages per unit of lag.yaml's static lag (the backlog's skew is the
    example's). burst: messages to each partition of the busiest replica. ledger_rate: messages
    per second to the failover policy's topic. restart_delay_s: the runner restarts a killed
    replica after this (a kubelet's crash-loop back-off starts at 10 s). watch_after_s: how long
    the demo waits, after the failover, for the killed replica to come back as a standby (0: no
    wait). timeout_s: the longest any one wait may take before the step fails. tick_s: the
    operator's --tick (1 s, so that a person sees each reaction within a second)."""

    name: str
    backlog_scale: int
    burst: int
    ledger_rate: float
    restart_delay_s: float
    watch_after_s: float
    timeout_s: float = 120.0
    tick_s: float = 1.0


FULL = Scenario(
    name="full", backlog_scale=10, burst=4000, ledger_rate=200, restart_delay_s=10, watch_after_s=30
)
SHORT = Scenario(
    name="short", backlog_scale=2, burst=1500, ledger_rate=100, restart_delay_s=10, watch_after_s=0
)
SCENARIOS = {scenario.name: scenario for scenario in (FULL, SHORT)}


def say(line: str = "") -> None:
    print(line, flush=True)


class Steps:
    """The step under way, for the `Error: <step>: <why>` line."""

    def __init__(self) -> None:
        self.current = "starting"

    def begin(self, title: str) -> None:
        self.current = title
        say(f"\n==> {title}")


# -- reading what the operator and the replicas did ---------------------------------------------


class Demo:
    """One run: the stack's clients, the operator, the runner, and what the steps share."""

    def __init__(
        self, scenario: Scenario, endpoints: Endpoints, *, namespace: str, workdir: Path, steps: Steps
    ) -> None:
        self.steps = steps
        self.scenario = scenario
        self.endpoints = endpoints
        self.namespace = namespace
        self.workdir = workdir
        self.record_dir = workdir / "journal"
        self.api = KubeApi(endpoints.kubeconfig)
        self.kubectl = Kubectl(kubectl_binary(), endpoints.kubeconfig)
        self.operator = OperatorRun(
            kubeconfig=endpoints.kubeconfig,
            namespace=namespace,
            log_path=workdir / "operator.log",
            tick_s=scenario.tick_s,
        )
        self.kubelet = Kubelet(
            api=self.api,
            namespace=namespace,
            workdir=workdir / "pods",
            record_dir=self.record_dir,
            extra_env={"GROUPOPS_PROCESSOR": PROCESSOR},
            restart_delay=scenario.restart_delay_s,
        )

    def wait(self, what: str, probe: Callable[[], T | None], timeout_s: float | None = None) -> T:
        """Poll `probe` until it returns something; DemoError naming `what` on timeout or when
        the operator has exited meanwhile."""
        limit = self.scenario.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if not self.operator.alive():
                raise DemoError(
                    f"the operator exited (code {self.operator.exit_code()}) while waiting for {what}:\n"
                    f"{self.operator.log_tail()}"
                )
            result = probe()
            if result:
                return result
            time.sleep(0.1)
        raise DemoError(f"timed out after {limit:.0f} s waiting for {what}")

    def policy(self, name: str) -> dict[str, Any]:
        return self.api.get("ConsumerGroupPolicy", self.namespace, name) or {}

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.policy(name).get("status") or {})

    def ready(self, info: PolicyInfo) -> dict[str, Any] | None:
        """The status once the policy is Ready for its generation, every replica runs, every
        member has acknowledged its part (Active or Standby) and every partition is owned."""
        policy = self.policy(info.name)
        status = policy.get("status") or {}
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        members = status.get("members") or []
        settled = (
            conditions.get("Ready", {}).get("status") == "True"
            and status.get("observedGeneration") == policy["metadata"]["generation"]
            and int(status.get("epoch") or 0) >= 1
            and status.get("readyReplicas") == info.replicas
            and len(members) == info.replicas
            and all(m.get("state") in ("Active", "Standby") for m in members)
            # every partition owned: not half way through a handoff
            and sum(len(m.get("partitions") or []) for m in members) == info.partitions
        )
        return dict(status) if settled else None

    def rebalances(self, name: str) -> list[dict[str, Any]]:
        """The policy's `Rebalanced` Events, parsed, oldest first."""
        found = []
        for event in self.api.list("Event", self.namespace):
            if event.get("reason") != "Rebalanced" or event["involvedObject"].get("name") != name:
                continue
            match = _REBALANCED.search(event.get("message", ""))
            if match:
                found.append({**match.groupdict(), "message": event["message"]})
        return sorted(found, key=lambda e: int(e["epoch"]))

    def journal(self, identity: str) -> list[dict[str, Any]]:
        """Every record the replicas of `identity` wrote (processed messages and events)."""
        records = []
        for path in sorted(self.record_dir.glob(f"{identity}.*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(json.JSONDecodeError):
                    records.append(json.loads(line))
        return records

    def show_table(self) -> None:
        say(f"$ kubectl get cgp -n {self.namespace} -o wide")
        say(self.kubectl.run("get", "cgp", "-n", self.namespace, "-o", "wide").rstrip())

    def show_plan(self, info: PolicyInfo) -> None:
        status = self.status(info.name)
        priorities = info.document["spec"]["consumers"].get("priorities") or {}
        members = sorted(status.get("members") or [], key=lambda m: m.get("instanceId", ""))
        say(f"{info.name} ({status.get('strategy')}, epoch {status.get('epoch')}): status.members")
        width = max((len(m.get("instanceId", "")) for m in members), default=0)
        for member in members:
            identity = member.get("instanceId", "?")
            partitions = ", ".join(member.get("partitions") or []) or "-"
            priority = f"priority {priorities[identity]:>2}  " if identity in priorities else ""
            say(
                f"  {identity:<{width}}  {member.get('state', '?'):<8} {priority}"
                f"lag {member.get('lag', 0):>7,}  {partitions}"
            )


# -- the steps ----------------------------------------------------------------------------------


def _established(crd: Mapping[str, Any] | None) -> bool:
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def _set_up(demo: Demo, lag: PolicyInfo, failover: PolicyInfo) -> SteadyWriter:
    demo.steps.begin("installing the ConsumerGroupPolicy and ConsumerGroupCluster CRDs with kubectl")
    demo.kubectl.run("apply", "--server-side", "--force-conflicts", "-f", str(CRD.parent))
    # Polled here, not with `kubectl wait --for=condition=Established`: that fails at once
    # (".status.conditions accessor error") when it reads the CRD before the API server has
    # written its first condition.
    deadline = time.monotonic() + 60
    for crd_name in ("consumergrouppolicies.groupops.dev", "consumergroupclusters.groupops.dev"):
        while not _established(demo.api.get("CustomResourceDefinition", None, crd_name)):
            if time.monotonic() > deadline:
                raise DemoError(f"the CRD {crd_name} was not Established within 60 s")
            time.sleep(0.1)
    demo.steps.begin(f"creating the namespace {demo.namespace}")
    try:
        demo.api.create("Namespace", None, {"metadata": {"name": demo.namespace}})
    except ApiError as e:
        raise DemoError(
            f"cannot create namespace {demo.namespace} ({e}): on a running stack give a new --namespace"
        ) from e
    # No controller-manager runs here to create the namespace's default ServiceAccount.
    demo.api.create("ServiceAccount", demo.namespace, {"metadata": {"name": "default"}})

    demo.steps.begin("starting the operator and the local runner")
    demo.kubelet.start()
    say(f"runner: plays the kubelet for the pods in {demo.namespace}: each runs as `groupops consume`")
    demo.operator.start()
    say(f"operator: {demo.operator.command}")

    demo.steps.begin("writing the data")
    create_topics(demo.endpoints.bootstrap, {lag.topic: lag.partitions, failover.topic: failover.partitions})
    counts = [lag_units * demo.scenario.backlog_scale for lag_units in static_lags("lag")]
    produce_counts(demo.endpoints.bootstrap, lag.topic, counts)
    say(
        f"{lag.topic}: a skewed backlog of {sum(counts):,} messages (lag.yaml's static lags x "
        f"{demo.scenario.backlog_scale}): "
        + ", ".join(f"{lag.topic}-{p} {count:,}" for p, count in enumerate(counts))
    )
    writer = SteadyWriter(
        demo.endpoints.bootstrap, failover.topic, failover.partitions, rate=demo.scenario.ledger_rate
    ).start()
    say(f"{failover.topic}: about {demo.scenario.ledger_rate:g} messages per second, until the end")

    for example, info in (("failover", failover), ("lag", lag)):
        demo.steps.begin(f"applying examples/policies/{example}.yaml as {info.name}, changed for this stack:")
        for change in info.changes:
            say(f"  {change}")
        demo.kubectl.run("apply", "-n", demo.namespace, "-f", "-", stdin=yaml.safe_dump(info.document))
    return writer


def _show_ready(demo: Demo, lag: PolicyInfo, failover: PolicyInfo) -> None:
    demo.steps.begin(
        "waiting for both policies to be Ready (pods running, every replica acknowledging its plan)"
    )
    began = time.monotonic()
    for info in (failover, lag):
        demo.wait(f"{info.name} to be Ready", functools.partial(demo.ready, info))
    say(f"both policies Ready after {time.monotonic() - began:.1f} s: {failover.name}, {lag.name}")
    demo.show_table()
    demo.steps.begin("the plans")
    demo.show_plan(lag)
    demo.show_plan(failover)


def _rebalance(demo: Demo, lag: PolicyInfo) -> None:
    demo.steps.begin(f"rebalance on lag ({lag.name})")
    began = time.monotonic()
    demo.wait(f"the {lag.topic} backlog to be processed", lambda: demo.status(lag.name).get("totalLag") == 0)
    say(f"the backlog is processed: total lag 0 ({time.monotonic() - began:.1f} s after Ready)")
    # Settled first: a handoff still in flight publishes its next epoch after the burst, and its
    # Event (trigger Handoff, the same lag before and after) is not the burst's replan.
    status = demo.wait(f"{lag.name} to settle (no handoff in flight)", lambda: demo.ready(lag))
    epoch = int(status["epoch"])
    busiest = max(status["members"], key=lambda m: (len(m.get("partitions") or []), m.get("instanceId", "")))
    targets = [int(p.rsplit("-", 1)[1]) for p in busiest["partitions"]]
    counts = [demo.scenario.burst if p in targets else 0 for p in range(lag.partitions)]
    produce_counts(demo.endpoints.bootstrap, lag.topic, counts, prefix="burst")
    burst_at = time.monotonic()
    say(
        f"a burst of {demo.scenario.burst:,} messages each lands on {', '.join(busiest['partitions'])}: "
        f"all in {busiest['instanceId']}'s set, so the plan made for the backlog no longer fits"
    )
    event = demo.wait(
        f"the operator to rebalance {lag.name} on lag (a plan after epoch {epoch})",
        lambda: next(
            (
                e
                for e in demo.rebalances(lag.name)
                if int(e["epoch"]) > epoch and e["trigger"] in _LAG_TRIGGERS
            ),
            None,
        ),
    )
    say(f"operator Event Rebalanced: {event['message']}")
    say(
        f"lag before the rebalance: max member lag {event['before']}; after: {event['after']} "
        f"(epoch {event['epoch']}, {event['trigger']}, {event['moves']} moves, "
        f"{time.monotonic() - burst_at:.1f} s after the burst)"
    )
    demo.wait(f"{lag.name}'s replicas to take the new plan", lambda: demo.ready(lag))
    demo.show_plan(lag)
    demo.wait("the burst to be processed", lambda: demo.status(lag.name).get("totalLag") == 0)
    say(f"lag after: total lag 0, {time.monotonic() - burst_at:.1f} s after the burst")


def _failover(demo: Demo, failover: PolicyInfo) -> None:
    demo.steps.begin(f"failover ({failover.name})")
    priorities: Mapping[str, int] = failover.document["spec"]["consumers"]["priorities"]
    order = sorted(priorities, key=lambda identity: -priorities[identity])
    active, standby = order[0], order[1]
    ordinal = int(active.rsplit("-", 1)[1])
    demo.wait(
        f"{active} consuming {failover.topic}", lambda: any(r.get("k") == "p" for r in demo.journal(active))
    )
    say(f"{active} (priority {priorities[active]}) is active and consuming; {standby} is the next standby")
    killed_at = time.time()
    demo.kubelet.crash(failover.pod(ordinal))
    say(f"killed {failover.pod(ordinal)} ({active}) with SIGKILL, as a node that dies")

    def taken_over() -> tuple[float, float] | None:
        records = demo.journal(standby)
        acks = [r["w"] for r in records if r.get("k") == "ack" and r["w"] > killed_at and r.get("owned")]
        firsts = [r["s"] for r in records if r.get("k") == "p" and r["s"] > killed_at]
        return (min(acks), min(firsts)) if acks and firsts else None

    acked, first = demo.wait(f"{standby} to take over", taken_over, timeout_s=60)
    say(f"{standby} acknowledged the new plan {acked - killed_at:.2f} s after the kill")
    say(f"{standby} processed its first message {first - killed_at:.2f} s after the kill")
    say(
        f"failover took {first - killed_at:.2f} s (kill -> the standby's first processed message; "
        f"operator --lease-duration 4 s, the default)"
    )
    time.sleep(2.0)
    consumed = sum(1 for r in demo.journal(standby) if r.get("k") == "p" and r["s"] > killed_at)
    say(f"{standby} has processed {consumed:,} messages since the kill")
    if demo.scenario.watch_after_s:
        say(
            f"the runner restarts {failover.pod(ordinal)} after {demo.scenario.restart_delay_s:g} s (a "
            f"kubelet's back-off); with failback: false it comes back as a standby"
        )
        with contextlib.suppress(DemoError):
            demo.wait(
                f"{active} to come back", lambda: demo.ready(failover), timeout_s=demo.scenario.watch_after_s
            )
    demo.show_table()
    demo.show_plan(failover)


# -- the run ------------------------------------------------------------------------------------


class _Stop(Exception):
    """SIGTERM to the demo: unwinds like Ctrl-C, through every `finally`."""


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        raise _Stop

    previous = signal.signal(signal.SIGTERM, on_term)
    # Ctrl-C raises KeyboardInterrupt even when SIGINT arrived ignored: a non-interactive shell
    # ignores it in what it starts with `&`, and Python then installs no handler of its own.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def _stop_all(demo: Demo | None, writer: SteadyWriter | None) -> None:
    """The writer, the operator (so that it reacts to nothing more), then the replicas."""
    began = time.monotonic()
    if writer is not None:
        writer.stop()
    if demo is None:
        return
    operator = "the operator and " if demo.operator.started else ""
    demo.operator.stop()
    demo.kubelet.stop()
    left = [run.name for run in demo.kubelet.history if run.process.alive()]
    for run in demo.kubelet.history:  # what did not stop in its grace period
        run.process.kill()
    demo.api.close()
    replicas = len(demo.kubelet.history)
    killed = f"; killed after their grace period: {', '.join(left)}" if left else ""
    say(f"stopped {operator}{replicas} replica process(es) in {time.monotonic() - began:.1f} s{killed}")


def _explain(demo: Demo | None) -> None:
    if demo is not None and demo.operator.log_path.is_file():
        say(f"operator log (last lines, {demo.operator.log_path}):\n{demo.operator.log_tail()}")


def main(
    scenario: Scenario,
    *,
    kubeconfig: str | None = None,
    bootstrap: str | None = None,
    namespace: str = "demo",
    keep: Path | None = None,
) -> int:
    """Run the demo (see the module docstring); 0 when every step passed, 1 with `Error: ...`
    when one failed, 130 when interrupted. `keep`: the directory for logs and journals (kept);
    else a temporary one, removed after a run that passed."""
    began = time.monotonic()
    workdir = keep or Path(tempfile.mkdtemp(prefix="groupops-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    say(f"groupops demo ({scenario.name} scenario); logs in {workdir}")
    demo: Demo | None = None
    writer: SteadyWriter | None = None
    steps = Steps()
    code = 1
    try:
        steps.begin("the local stack")
        with _signals(), local_stack(workdir, kubeconfig=kubeconfig, bootstrap=bootstrap, say=say) as ends:
            try:
                suffix = "" if ends.own else f"-{namespace}"
                lag = adapt_example("lag", bootstrap=ends.bootstrap, suffix=suffix)
                failover = adapt_example("failover", bootstrap=ends.bootstrap, suffix=suffix)
                demo = Demo(scenario, ends, namespace=namespace, workdir=workdir, steps=steps)
                writer = _set_up(demo, lag, failover)
                _show_ready(demo, lag, failover)
                _rebalance(demo, lag)
                _failover(demo, failover)
                code = 0
            finally:
                with no_interrupts():
                    say("\n==> stopping everything")
                    _stop_all(demo, writer)
    except (KeyboardInterrupt, _Stop):
        say("\ninterrupted: everything the demo started is stopped")
        code = 130
    except (DevstackError, ApiError, KafkaException, OSError) as e:
        say(f"\nError: {steps.current}: {e}")
        _explain(demo)
    except Exception as e:  # a bug or a surprise: the step, and the traceback in the logs
        (workdir / "demo-error.txt").write_text(traceback.format_exc())
        say(f"\nError: {steps.current}: {type(e).__name__}: {e} (traceback in {workdir}/demo-error.txt)")
        _explain(demo)
    if code == 0:
        say(f"\ndemo done in {time.monotonic() - began:.1f} s; nothing left running")
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    else:
        say(f"logs kept in {workdir}")
    return code
