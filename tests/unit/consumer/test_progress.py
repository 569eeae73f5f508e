"""The progress watchdog (consumer/progress.py): which replicas are stuck, what the watchdog does
about it, how the runtimes sample a replica, and where the interval comes from. Times are
monotonic seconds fed by hand, except for the watchdog thread's own tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from groupops.consumer import ConsumerConfigError, RuntimeSettings
from groupops.consumer.brokerprobe import sample_progress
from groupops.consumer.progress import (
    EXIT_STUCK,
    ProgressTracker,
    ProgressWatchdog,
    Rule,
    Sample,
    Stuck,
    probe_interval,
)
from groupops.model import TopicPartition
from tests.unit.consumer.pod_env import REQUIRED_POD_ENV
from tests.unit.consumer.test_consumer_lease import SETTINGS, Clock, LeaseStore, keeper

INTERVAL = 10.0
P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
BOTH = frozenset({P0, P1})

# -- the rule -----------------------------------------------------------------------------------


def answer(
    positions: dict[TopicPartition, int],
    highs: dict[TopicPartition, int],
    owned: frozenset[TopicPartition] = BOTH,
) -> Sample:
    return Sample(owned=owned, positions=positions, high_watermarks=highs, answered=True)


def silence(positions: dict[TopicPartition, int], owned: frozenset[TopicPartition] = BOTH) -> Sample:
    """The broker did not answer (positions are local, they still come)."""
    return Sample(owned=owned, positions=positions)


LOOP = "loop back to poll"
Step = tuple[float, Sample | str]


def every(seconds: float, until: float, make: Any, start: float = 0.0) -> list[Step]:
    """`make(t)` at start, start + seconds, ... up to `until`."""
    steps: list[Step] = []
    t = start
    while t <= until:
        steps.append((t, make(t)))
        t += seconds
    return steps


def beats(until: float, start: float = 0.0) -> list[Step]:
    return every(0.5, until, lambda t: LOOP, start)


def judge(steps: Sequence[Step], at: float) -> Stuck | None:
    tracker = ProgressTracker(INTERVAL, now=0.0)
    for t, event in sorted(steps, key=lambda step: step[0]):
        if event == LOOP:
            tracker.loop_returned(t)
        else:
            assert isinstance(event, Sample)
            tracker.observe(t, event)
    return tracker.verdict(at)


@dataclass(frozen=True)
class Case:
    steps: list[Step]
    at: float
    stuck: Rule | None
    lasting: float | None = None
    """When stuck: how long the rule has held (what the log line says)."""
    notes: list[str] = field(default_factory=list)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            Case(
                steps=beats(100) + every(2, 100, lambda t: answer({P0: 50, P1: 7}, {P0: 50, P1: 7})),
                at=100,
                stuck=None,
            ),
            id="an idle topic without lag is fine however long",
        ),
        pytest.param(
            Case(
                steps=beats(60) + every(2, 60, lambda t: answer({P0: int(t), P1: 0}, {P0: 1000, P1: 1000})),
                at=60,
                stuck=None,
            ),
            id="lag while a position keeps advancing is fine",
        ),
        pytest.param(
            Case(
                steps=beats(30) + every(2, 30, lambda t: answer({P0: 5, P1: 9}, {P0: 80, P1: 9})),
                at=30,
                stuck=Rule.PROGRESS,
                lasting=30,
            ),
            id="lag and no position advancing for the interval is stuck",
        ),
        pytest.param(
            Case(
                steps=beats(30)
                + every(2, 14, lambda t: answer({P0: int(t), P1: 0}, {P0: 100, P1: 0}))
                + every(2, 30, lambda t: answer({P0: 14, P1: 0}, {P0: 100, P1: 0}), start=16),
                at=23.5,
                stuck=None,
            ),
            id="lag without progress for less than the interval is not yet stuck",
        ),
        pytest.param(
            Case(
                steps=beats(30)
                + every(2, 14, lambda t: answer({P0: int(t), P1: 0}, {P0: 100, P1: 0}))
                + every(2, 30, lambda t: answer({P0: 14, P1: 0}, {P0: 100, P1: 0}), start=16),
                at=24,
                stuck=Rule.PROGRESS,
                lasting=10,
            ),
            id="the interval counts from the last advance",
        ),
        pytest.param(
            Case(
                steps=beats(30)
                + every(2, 10, lambda t: answer({P0: 5, P1: 5}, {P0: 5, P1: 5}))
                + every(2, 30, lambda t: answer({P0: 5, P1: 5}, {P0: 9, P1: 5}), start=12),
                at=21.5,
                stuck=None,
            ),
            id="lag counts from the first answer that shows it",
        ),
        pytest.param(
            Case(
                steps=beats(30)
                + every(2, 10, lambda t: answer({P0: 5, P1: 5}, {P0: 5, P1: 5}))
                + every(2, 30, lambda t: answer({P0: 5, P1: 5}, {P0: 9, P1: 5}), start=12),
                at=22,
                stuck=Rule.PROGRESS,
                lasting=10,
            ),
            id="lag without progress for the interval from its first sighting is stuck",
        ),
        pytest.param(
            Case(
                steps=beats(3) + every(2, 30, lambda t: answer({P0: 5, P1: 5}, {P0: 5, P1: 5})),
                at=13,
                stuck=Rule.LOOP,
                lasting=10,
            ),
            id="a loop not back to poll for the interval is stuck (a callback or commit blocks)",
        ),
        pytest.param(
            Case(
                steps=beats(3)
                + every(2, 2, lambda t: answer({P0: 5, P1: 5}, {P0: 5, P1: 5}))
                + every(2, 30, lambda t: answer({P0: 5, P1: 5}, {P0: 9, P1: 5}), start=4),
                at=13,
                stuck=Rule.LOOP,
            ),
            id="a blocked loop shows as itself, not as the lag it causes",
        ),
        pytest.param(
            Case(
                steps=beats(30) + every(2, 30, lambda t: silence({P0: 5, P1: 5})),
                at=10,
                stuck=Rule.BROKER,
                lasting=10,
            ),
            id="no broker contact for the interval while owning partitions is stuck",
        ),
        pytest.param(
            Case(
                steps=beats(30)
                + every(2, 6, lambda t: answer({P0: 5, P1: 5}, {P0: 5, P1: 5}))
                + every(2, 30, lambda t: silence({P0: 5, P1: 5}), start=8),
                at=15.5,
                stuck=None,
            ),
            id="the broker interval counts from the last answer",
        ),
        pytest.param(
            Case(steps=every(2, 100, lambda t: silence({}, owned=frozenset())), at=100, stuck=None),
            id="owning nothing is never stuck (no loop, no broker, no progress)",
        ),
        pytest.param(
            Case(
                steps=beats(40)
                + every(2, 20, lambda t: silence({}, owned=frozenset()))
                + every(2, 40, lambda t: answer({P0: 3, P1: 3}, {P0: 9, P1: 9}), start=22),
                at=31,
                stuck=None,
            ),
            id="the interval starts when the replica starts owning",
        ),
        pytest.param(
            Case(
                steps=[
                    *beats(30),
                    (0, answer({P0: 5}, {P0: 9, P1: 9})),
                    *every(2, 30, lambda t: answer({P0: 5}, {P0: 5}), start=2),
                ],
                at=30,
                stuck=Rule.PROGRESS,
            ),
            id="a partial answer without lag proves nothing",
        ),
        pytest.param(
            Case(
                steps=beats(30) + every(2, 30, lambda t: answer({}, {P0: 9, P1: 9})),
                at=30,
                stuck=None,
            ),
            id="a partition without a known position is not judged lagging",
        ),
        pytest.param(
            Case(
                steps=beats(30)
                + every(2, 8, lambda t: answer({P0: 5}, {P0: 9}, owned=frozenset({P0})))
                + every(2, 30, lambda t: answer({P0: 5, P1: 1}, {P0: 9, P1: 4}), start=10),
                at=19,
                stuck=None,
            ),
            id="gaining a partition restarts the progress clock",
        ),
    ],
)
def test_the_rule(case: Case) -> None:
    verdict = judge(case.steps, case.at)
    assert (verdict and verdict.rule) == case.stuck, verdict
    if case.lasting is not None:
        assert verdict is not None and verdict.for_s == pytest.approx(case.lasting)


def test_the_verdict_says_which_rule_and_for_how_long() -> None:
    assert str(Stuck(Rule.LOOP, 12.34)) == (
        "the main loop has not come back to poll (a callback or a commit blocks) for 12.3 s"
    )


def test_the_broker_is_sampled_a_few_times_per_interval_within_1_to_5_seconds() -> None:
    assert [probe_interval(s) for s in (5, 6, 20, 300, 86_400)] == [1.0, 1.2, 4.0, 5.0, 5.0]


# -- the watchdog thread ------------------------------------------------------------------------


class Replica:
    """What a runtime gives the watchdog: a sampler and a reaction, recorded."""

    def __init__(self, sample: Sample | None = None, *, exit_after: float = 0.2) -> None:
        self.sample = sample or answer({P0: 5, P1: 5}, {P0: 5, P1: 5})
        self.exit_after = exit_after
        self.stuck: list[Stuck] = []
        self.deadline = 0.0
        self.exits: list[tuple[int, float]] = []
        self.exited = threading.Event()

    def take(self, timeout_s: float) -> Sample:
        return self.sample

    def on_stuck(self, stuck: Stuck) -> float:
        self.stuck.append(stuck)
        self.deadline = time.monotonic() + self.exit_after
        return self.deadline

    def exit(self, code: int) -> None:
        self.exits.append((code, time.monotonic()))
        self.exited.set()

    def watchdog(self, interval: float = 0.3, **kwargs: Any) -> ProgressWatchdog:
        return ProgressWatchdog(
            interval,
            sample=kwargs.pop("sample", self.take),
            on_stuck=self.on_stuck,
            exit_with=self.exit,
            probe_interval_s=0.05,
            check_s=0.02,
            **kwargs,
        )


def test_a_stuck_replica_surrenders_then_exits_with_its_own_code_once_the_lease_expired() -> None:
    replica = Replica()
    watchdog = replica.watchdog()
    watchdog.start()  # the "main loop" never beats: a callback blocks
    try:
        assert replica.exited.wait(30)
    finally:
        watchdog.stop()
    assert [s.rule for s in replica.stuck] == [Rule.LOOP]
    assert watchdog.stuck == replica.stuck[0]
    ((code, at),) = replica.exits
    assert code == EXIT_STUCK
    assert at >= replica.deadline, "not before the Lease has surely expired"


def test_a_replica_whose_loop_keeps_polling_on_an_idle_topic_is_left_alone() -> None:
    replica = Replica()
    watchdog = replica.watchdog()
    watchdog.start()
    until = time.monotonic() + 1.5  # five intervals
    while time.monotonic() < until:
        watchdog.beat()
        time.sleep(0.01)
    assert watchdog.stop()
    assert replica.stuck == [] and replica.exits == []


def test_stopping_cancels_a_pending_exit() -> None:
    replica = Replica(exit_after=60)
    watchdog = replica.watchdog()
    watchdog.start()
    deadline = time.monotonic() + 30
    while not replica.stuck and time.monotonic() < deadline:
        time.sleep(0.01)
    assert replica.stuck, "judged stuck"
    assert watchdog.stop(), "a graceful stop while waiting for the Lease to expire ends the thread"
    assert replica.exits == []


def test_a_sampler_that_fails_after_the_replica_owned_partitions_means_stuck_on_broker() -> None:
    replica = Replica()
    calls = 0

    def flaky(timeout_s: float) -> Sample:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RuntimeError("a bug in the sampler")
        return replica.sample

    watchdog = replica.watchdog(sample=flaky)
    watchdog.start()
    try:
        deadline = time.monotonic() + 30
        while not replica.stuck and time.monotonic() < deadline:
            watchdog.beat()
            time.sleep(0.01)
    finally:
        watchdog.stop()
    assert [s.rule for s in replica.stuck] == [Rule.BROKER]


def test_a_reaction_that_fails_still_ends_the_process() -> None:
    replica = Replica()

    def failing(stuck: Stuck) -> float:
        raise RuntimeError("the API client is broken too")

    watchdog = ProgressWatchdog(
        0.3,
        sample=replica.take,
        on_stuck=failing,
        exit_with=replica.exit,
        probe_interval_s=0.05,
        check_s=0.02,
    )
    watchdog.start()
    try:
        assert replica.exited.wait(30)
    finally:
        watchdog.stop()
    assert [code for code, _ in replica.exits] == [EXIT_STUCK]


# -- the Lease stops at once --------------------------------------------------------------------


def test_surrendering_the_lease_stops_validity_and_renewals_at_once() -> None:
    store, clock = LeaseStore(), Clock()
    k = keeper(store, clock)
    assert k.acquire(threading.Event())
    clock.now += 0.5
    assert k.renew_once()
    renewed_at = clock.now
    version = store.version
    clock.now += 0.3

    expires_at = k.surrender()
    assert not k.valid()
    assert expires_at == renewed_at + SETTINGS.request_timeout_s + SETTINGS.duration_s
    assert not k.renew_once()
    assert store.version == version, "nothing written after the surrender"
    assert k.release(through=0, acked_epoch=None), "a release on exit is still written"


# -- sampling a replica -------------------------------------------------------------------------


class FakeClient:
    """The two calls `sample_progress` makes, against fixed answers."""

    def __init__(
        self,
        *,
        committed: dict[TopicPartition, int] | None = None,
        watermarks: dict[TopicPartition, tuple[int, int]] | None = None,
        failure: KafkaError | None = None,
    ) -> None:
        self.committed_offsets = committed or {}
        self.watermarks = watermarks or {}
        self.failure = failure
        self.asked: list[TopicPartition] = []

    def committed(self, partitions: list[Any], timeout: float) -> list[Any]:
        if self.failure is not None:
            raise KafkaException(self.failure)
        return [
            KafkaPartition(
                p.topic, p.partition, self.committed_offsets.get(TopicPartition(p.topic, p.partition), -1001)
            )
            for p in partitions
        ]

    def get_watermark_offsets(self, partition: Any, timeout: float, cached: bool) -> tuple[int, int]:
        assert not cached, "a real round trip, not what the last fetch saw"
        if self.failure is not None:
            raise KafkaException(self.failure)
        tp = TopicPartition(partition.topic, partition.partition)
        self.asked.append(tp)
        return self.watermarks[tp]


def sample(client: FakeClient, processed: dict[TopicPartition, int], reset: str = "earliest") -> Sample:
    return sample_progress(client, BOTH, processed, auto_offset_reset=reset, timeout_s=1.0)


def test_a_sample_stops_at_the_first_partition_that_lags() -> None:
    client = FakeClient(watermarks={P0: (0, 90), P1: (0, 90)})
    taken = sample(client, {P0: 10, P1: 10})
    assert client.asked == [P0]
    assert taken.lagging and taken.answered and not taken.complete


def test_a_sample_without_lag_reads_every_partition() -> None:
    client = FakeClient(watermarks={P0: (0, 10), P1: (0, 4)})
    taken = sample(client, {P0: 10, P1: 4})
    assert client.asked == [P0, P1]
    assert taken.complete and not taken.lagging


@pytest.mark.parametrize(
    ("client", "reset", "expected"),
    [
        pytest.param(
            FakeClient(committed={P0: 6, P1: 2}, watermarks={P0: (0, 6), P1: (0, 2)}),
            "earliest",
            {P0: 6, P1: 2},
            id="the committed offset",
        ),
        pytest.param(
            FakeClient(watermarks={P0: (4, 4), P1: (1, 1)}),
            "earliest",
            {P0: 4, P1: 1},
            id="else earliest: the low watermark",
        ),
        pytest.param(
            FakeClient(watermarks={P0: (4, 9), P1: (1, 3)}),
            "latest",
            {},
            id="else latest: unknown, so never lagging",
        ),
    ],
)
def test_positions_of_unprocessed_partitions(
    client: FakeClient, reset: str, expected: dict[TopicPartition, int]
) -> None:
    taken = sample(client, {}, reset)
    assert dict(taken.positions) == expected


@pytest.mark.parametrize(
    ("failure", "answered"),
    [
        pytest.param(KafkaError(KafkaError._TIMED_OUT), False, id="a timeout is no answer"),
        pytest.param(KafkaError(KafkaError._TRANSPORT), False, id="a broken connection is no answer"),
        pytest.param(
            KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION), True, id="an error the broker sent is an answer"
        ),
    ],
)
def test_what_counts_as_a_broker_answer(failure: KafkaError, answered: bool) -> None:
    taken = sample(FakeClient(failure=failure), {P0: 1, P1: 1})
    assert taken.answered is answered
    assert taken.high_watermarks == {}


def test_a_replica_owning_nothing_is_not_sampled_at_all() -> None:
    taken = sample_progress(
        FakeClient(failure=KafkaError(KafkaError._TIMED_OUT)),
        frozenset(),
        {},
        auto_offset_reset="earliest",
        timeout_s=1.0,
    )
    assert taken == Sample(owned=frozenset())


# -- the interval's setting ---------------------------------------------------------------------

NATIVE = {"GROUPOPS_DELIVERY": "native", "GROUPOPS_STRATEGY": "range", "GROUPOPS_TOPICS": "orders"}


def test_the_interval_defaults_to_kafkas_and_comes_from_the_pod() -> None:
    assert RuntimeSettings.from_env(REQUIRED_POD_ENV).max_poll_interval_s == 300
    env = {**REQUIRED_POD_ENV, "GROUPOPS_MAX_POLL_INTERVAL_SECONDS": "6"}
    assert RuntimeSettings.from_env(env).max_poll_interval_s == 6
    native = {**env, **NATIVE, "GROUPOPS_KAFKA_PROPERTIES": '{"session.timeout.ms":"6000"}'}
    assert RuntimeSettings.from_env(native).max_poll_interval_s == 6


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"GROUPOPS_MAX_POLL_INTERVAL_SECONDS": "soon"}, id="not a number"),
        pytest.param({"GROUPOPS_MAX_POLL_INTERVAL_SECONDS": "4"}, id="below 5 s"),
        pytest.param({"GROUPOPS_MAX_POLL_INTERVAL_SECONDS": "86401"}, id="above a day"),
        pytest.param(
            {"GROUPOPS_MAX_POLL_INTERVAL_SECONDS": "30", **NATIVE},
            id="native below librdkafka's session timeout",
        ),
        pytest.param(
            {"GROUPOPS_KAFKA_PROPERTIES": '{"max.poll.interval.ms":"600000"}'},
            id="a different max.poll.interval.ms property",
        ),
    ],
)
def test_a_bad_interval_is_refused_naming_its_variable(change: dict[str, str]) -> None:
    with pytest.raises(ConsumerConfigError) as caught:
        RuntimeSettings.from_env({**REQUIRED_POD_ENV, **change})
    assert caught.value.field == "GROUPOPS_MAX_POLL_INTERVAL_SECONDS"


# -- what a heartbeat reports (docs/design.md §7.5) --------------------------------------------


def test_the_report_says_seconds_since_the_last_poll_advance_under_lag_and_commit() -> None:
    tracker = ProgressTracker(INTERVAL, now=0.0)
    assert tracker.report(0.5) == {"poll": 0.5}, "no lag, no commit: only the loop"
    tracker.observe(1.0, answer({P0: 5, P1: 5}, {P0: 9, P1: 5}))  # owns both, P0 lags
    tracker.loop_returned(2.0)
    assert tracker.report(4.04, committed_at=3.0) == {"poll": 2.0, "advance": 3.0, "commit": 1.0}
    tracker.observe(5.0, answer({P0: 7, P1: 5}, {P0: 9, P1: 5}))  # P0 advanced, still lags
    assert tracker.report(6.0)["advance"] == 1.0
    tracker.observe(7.0, answer({P0: 9, P1: 5}, {P0: 9, P1: 5}))  # caught up: no lag
    assert "advance" not in tracker.report(8.0)


def test_the_report_is_rounded_and_never_negative() -> None:
    tracker = ProgressTracker(INTERVAL, now=10.0)
    assert tracker.report(9.0, committed_at=9.5) == {"poll": 0.0, "commit": 0.0}
    assert tracker.report(10.123456) == {"poll": 0.1}


def test_the_watchdog_reports_from_any_thread_with_the_loops_last_beat() -> None:
    now = [50.0]
    watchdog = ProgressWatchdog(
        INTERVAL, sample=Replica().take, on_stuck=Replica().on_stuck, monotonic=lambda: now[0]
    )
    now[0] = 53.0
    watchdog.beat()
    now[0] = 54.5
    assert watchdog.report(committed_at=50.0) == {"poll": 1.5, "commit": 4.5}


def test_a_verdict_from_the_operator_is_declared_as_the_watchdogs_own() -> None:
    replica = Replica()
    watchdog = replica.watchdog(interval=3600.0)  # too lenient ever to fire by itself
    watchdog.start()
    try:
        watchdog.judged_stuck(Stuck(Rule.OPERATOR, 6.0))
        assert replica.exited.wait(30)
    finally:
        watchdog.stop()
    assert [s.rule for s in replica.stuck] == [Rule.OPERATOR]
    assert replica.exits[0][0] == EXIT_STUCK
