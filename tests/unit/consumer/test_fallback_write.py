"""The fallback Lease write after an unanswered heartbeat waits while the replica's validity covers
a later one (planner.liveness.fallback_write_may_wait, docs/design.md §7.5), and in a fleet too
large for the operator's write budget for the replica's moment of the spread its grants named
(planner.liveness.fallback_write_at): the rules themselves, and the keeper's renewal thread
against a heartbeat address nobody answers (a bound loopback socket that stays silent), one that
refuses, and one that grants with a spread and then falls silent."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import given
from hypothesis import strategies as st

from groupops.consumer.lease import LeaseKeeper
from groupops.consumer.metrics import ConsumerMetrics
from groupops.consumer.settings import LeaseSettings
from groupops.planner.liveness import (
    HeartbeatAnswer,
    HeartbeatStatus,
    decode_heartbeat,
    encode_answer,
    fallback_write_at,
    fallback_write_may_wait,
)
from tests.unit.consumer.test_consumer_lease import NAME, LeaseStore

# -- the rule -------------------------------------------------------------------------------------


def test_with_the_default_4_s_lease_an_unanswered_heartbeat_is_always_followed_by_a_write() -> None:
    granted_at = 100.0
    # the earliest a later heartbeat can go unanswered: an interval and its timeout after the grant
    for tenths in range(23):
        assert not fallback_write_may_wait(
            now=granted_at + 1.75 + tenths / 10,
            valid_until=granted_at + 3.0,  # a grant of 0.75 x 4 s
            interval_s=1.0,
            heartbeat_timeout_s=0.75,
            write_timeout_s=1.0,  # a quarter of the duration
        )


def test_with_a_10_s_lease_the_write_waits_for_the_first_3_75_s_after_the_grant() -> None:
    granted_at = 100.0

    def waits(after: float) -> bool:
        return fallback_write_may_wait(
            now=granted_at + after,
            valid_until=granted_at + 7.5,
            interval_s=1.0,
            heartbeat_timeout_s=0.75,
            write_timeout_s=2.0,
        )

    assert waits(1.75) and waits(3.5) and waits(3.75)
    assert not waits(3.76) and not waits(5.25)


@given(
    now=st.floats(0, 1_000),
    left=st.floats(0, 30),
    interval=st.floats(0.05, 5),
    heartbeat=st.floats(0.01, 5),
    write=st.floats(0.01, 5),
    next_try=st.floats(0, 1),
    beat_took=st.floats(0, 1),
    write_took=st.floats(0, 1),
)
def test_a_write_left_for_later_still_returns_before_the_validity_ends(
    now: float,
    left: float,
    interval: float,
    heartbeat: float,
    write: float,
    next_try: float,
    beat_took: float,
    write_took: float,
) -> None:
    """If it waits now, the next interval's heartbeat (within its timeout) and, if that is not
    answered either, the write (within its timeout) end before the validity does."""
    valid_until = now + left
    if fallback_write_may_wait(
        now=now,
        valid_until=valid_until,
        interval_s=interval,
        heartbeat_timeout_s=heartbeat,
        write_timeout_s=write,
    ):
        write_returned = now + next_try * interval + beat_took * heartbeat + write_took * write
        assert write_returned <= valid_until + 1e-9


@given(
    needed_since=st.floats(0, 1_000),
    after=st.none() | st.floats(0, 100),
    spread=st.floats(0, 100),
    phase=st.floats(0, 1, exclude_max=True),
)
def test_a_spread_write_is_never_before_it_was_needed_nor_within_a_spread_of_the_last(
    needed_since: float, after: float | None, spread: float, phase: float
) -> None:
    last_write = None if after is None else needed_since + after
    at = fallback_write_at(needed_since=needed_since, last_write=last_write, spread_s=spread, phase=phase)
    assert at >= needed_since
    if last_write is not None:
        assert at == last_write + spread
    else:
        assert at <= needed_since + spread


def test_without_a_spread_the_write_is_due_when_needed_as_before() -> None:
    assert fallback_write_at(needed_since=7.0, last_write=None, spread_s=0.0, phase=0.9) == 7.0
    assert fallback_write_at(needed_since=7.0, last_write=8.5, spread_s=0.0, phase=0.9) == 8.5


def test_a_fleet_that_lost_its_leader_together_writes_at_the_budgets_rate() -> None:
    # 3,000 replicas whose writes all became needed at 0 (a 4 s Lease's grants never cover waiting),
    # a budget of 200 writes/s: the grants named a spread of 15 s. Each writes at its moment, then
    # a spread later, for as long as no leader answers.
    fleet, budget = 3000, 200.0
    spread = fleet / budget
    per_second: list[int] = [0] * 45
    for i in range(fleet):
        last: float | None = None
        while True:
            at = fallback_write_at(needed_since=0.0, last_write=last, spread_s=spread, phase=i / fleet)
            if at >= len(per_second):
                break
            per_second[int(at)] += 1
            last = at
    assert max(per_second) <= budget, per_second
    assert sum(per_second) == fleet * 3, "every replica wrote once per spread"


# -- the keeper's renewal thread --------------------------------------------------------------------


@contextmanager
def heartbeat_port(
    answer: HeartbeatStatus | None,
    received: list[float] | None = None,
    *,
    spread: float = 0.0,
    silent: threading.Event | None = None,
) -> Iterator[str]:
    """A loopback UDP port: silent (None), or answering every heartbeat with `answer` (grants
    naming `spread`) until `silent` is set; the monotonic moment of each datagram goes to
    `received`."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                data, sender = sock.recvfrom(2048)
            except TimeoutError:
                continue
            if received is not None:
                received.append(time.monotonic())
            if answer is not None and not (silent is not None and silent.is_set()):
                seq = decode_heartbeat(data).seq
                if answer is HeartbeatStatus.GRANTED:  # valid 0.75 x the 3 s Lease
                    reply = HeartbeatAnswer(seq=seq, status=answer, valid=2.25, spread=spread)
                else:
                    reply = HeartbeatAnswer(seq=seq, status=answer, reason="unknown Lease")
                sock.sendto(encode_answer(reply), sender)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        sock.close()


class CountingStore(LeaseStore):
    def __init__(self) -> None:
        super().__init__()
        self.updates = 0
        self.update_times: list[float] = []

    def update_lease(self, body: dict[str, object]) -> dict[str, object]:  # type: ignore[override]
        self.updates += 1
        self.update_times.append(time.monotonic())
        return super().update_lease(body)  # type: ignore[arg-type]


def run_keeper(
    address: str,
    *,
    renew_deadline_s: float,
    seconds: float,
    metrics: ConsumerMetrics | None = None,
    beat_interval_s: float | None = None,
    phase: float | None = None,
    store: CountingStore | None = None,
) -> tuple[int, float]:
    """Lease writes during `seconds` of the keeper's thread (after the take), and the longest time
    it was not valid in that span (sampled every 10 ms). `metrics` follow the keeper's counts;
    `store` keeps the writes' moments."""
    settings = LeaseSettings(
        duration_s=3,
        renew_interval_s=0.2,
        renew_deadline_s=renew_deadline_s,
        request_timeout_s=0.3,
        heartbeat_addresses=(address,),
        heartbeat_interval_s=beat_interval_s,
    )
    store = CountingStore() if store is None else store
    k = LeaseKeeper(
        store,  # type: ignore[arg-type]
        settings,
        name=NAME,
        policy="orders",
        identity="g-0",
        incarnation="aaaa",
        phase=phase,
    )
    if metrics is not None:
        metrics.follow_liveness(k)
    assert k.acquire(threading.Event())
    k.start()
    invalid_since: float | None = None
    longest_invalid = 0.0
    try:
        end = time.monotonic() + seconds
        while (now := time.monotonic()) < end:
            if k.valid():
                invalid_since = None
            else:
                invalid_since = now if invalid_since is None else invalid_since
                longest_invalid = max(longest_invalid, now - invalid_since)
            time.sleep(0.01)
    finally:
        k.stop()
    return store.updates, longest_invalid


def test_no_leader_answering_a_long_validity_costs_a_write_only_near_its_end() -> None:
    # a write keeps it valid 2 s; an interval, a heartbeat and a write take 0.2 + 0.15 + 0.3 s: it
    # writes about every 1.35-1.7 s instead of every 0.35 s
    with heartbeat_port(None) as address:
        writes, longest_invalid = run_keeper(address, renew_deadline_s=2.0, seconds=4.0)
    assert 1 <= writes <= 4, writes
    assert longest_invalid == 0.0, "it stayed valid throughout"


def test_no_leader_answering_a_short_validity_is_written_every_interval() -> None:
    # 0.6 s of validity never covers 0.65 s: the write follows every unanswered heartbeat
    with heartbeat_port(None) as address:
        writes, _ = run_keeper(address, renew_deadline_s=0.6, seconds=4.0)
    assert writes >= 8, writes


def test_granted_heartbeats_come_a_heartbeat_interval_apart_unanswered_ones_at_the_renew_pace() -> None:
    # the steady interval is the operator's CPU; only a grant earns it: a replica the operator
    # stopped answering retries every renew interval, which its fallback rule counts on
    granted: list[float] = []
    with heartbeat_port(HeartbeatStatus.GRANTED, granted) as address:
        writes, longest_invalid = run_keeper(address, renew_deadline_s=2.0, seconds=3.0, beat_interval_s=0.6)
    gaps = [b - a for a, b in itertools.pairwise(granted)]
    assert writes == 0 and longest_invalid == 0.0
    assert 4 <= len(granted) <= 6, granted  # 3 s at 0.6 s, not 15 at the renew interval's 0.2 s
    assert min(gaps) >= 0.55, gaps
    unanswered: list[float] = []
    with heartbeat_port(None, unanswered) as address:
        run_keeper(address, renew_deadline_s=2.0, seconds=3.0, beat_interval_s=0.6)
    gaps = [b - a for a, b in itertools.pairwise(unanswered)]
    assert len(unanswered) >= 8 and min(gaps) < 0.45, gaps  # 0.2 s apart plus the exchange's 0.15 s


def test_a_refused_heartbeat_is_followed_by_a_write_at_once_whatever_the_validity() -> None:
    # a refusal may mean a fence: the write's conflict is how the replica learns it
    with heartbeat_port(HeartbeatStatus.REFUSED) as address:
        writes, _ = run_keeper(address, renew_deadline_s=2.0, seconds=4.0)
    assert writes >= 8, writes


def scraped(metrics: ConsumerMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    assert value is not None, f"{name}{labels} is not served"
    return value


def test_the_replicas_metrics_count_its_heartbeats_by_answer_its_lease_writes_and_the_waits() -> None:
    metrics = ConsumerMetrics()
    assert scraped(metrics, "groupops_consumer_lease_writes_total") == 0, "served before a keeper"
    with heartbeat_port(None) as address:
        writes, _ = run_keeper(address, renew_deadline_s=2.0, seconds=2.0, metrics=metrics)
    unanswered = scraped(metrics, "groupops_consumer_heartbeats_total", answer="unanswered")
    waited = scraped(metrics, "groupops_consumer_fallback_waits_total")
    assert unanswered >= 4, "one exchange per 0.2 s interval, none answered"
    assert 1 <= waited < unanswered, "the waits are the unanswered exchanges not followed by a write"
    assert scraped(metrics, "groupops_consumer_lease_writes_total") == writes + 1, "the take, then the writes"
    assert scraped(metrics, "groupops_consumer_heartbeats_total", answer="granted") == 0

    refused_metrics = ConsumerMetrics()
    with heartbeat_port(HeartbeatStatus.REFUSED) as address:
        run_keeper(address, renew_deadline_s=2.0, seconds=1.0, metrics=refused_metrics)
    assert scraped(refused_metrics, "groupops_consumer_heartbeats_total", answer="refused") >= 3
    assert scraped(refused_metrics, "groupops_consumer_fallback_waits_total") == 0, "a refusal never waits"


def test_with_a_spread_the_writes_of_a_replica_no_leader_answers_come_a_spread_apart() -> None:
    # Granted for 1 s with a spread of 1.2 s, then nobody answers. A 0.6 s validity never covers
    # waiting (0.2 + 0.15 + 0.3 s), so without the spread the keeper would write after every
    # unanswered exchange, about every 0.35 s; with it, half a spread after the write became
    # needed (phase 0.5), then a spread after each write, and it pauses in between.
    silent = threading.Event()
    store = CountingStore()
    metrics = ConsumerMetrics()
    timer = threading.Timer(1.0, silent.set)
    with heartbeat_port(HeartbeatStatus.GRANTED, spread=1.2, silent=silent) as address:
        timer.start()
        started = time.monotonic()
        try:
            _, longest_invalid = run_keeper(
                address, renew_deadline_s=0.6, seconds=4.0, phase=0.5, store=store, metrics=metrics
            )
        finally:
            timer.cancel()
    writes = store.update_times  # the take is a create: these are the fallback writes
    # about 1.9 and 3.3 s after the start; a loaded machine may push the second past the end
    assert 1 <= len(writes) <= 3, [round(t - started, 2) for t in writes]
    assert writes[0] - started >= 1.0 + 0.6, "not before half a spread after the grants stopped"
    gaps = [b - a for a, b in itertools.pairwise(writes)]
    assert min(gaps, default=1.2) >= 1.2 - 0.05, gaps
    assert longest_invalid >= 0.3, "it paused between writes rather than write more often"
    assert scraped(metrics, "groupops_consumer_fallback_spread_waits_total") >= 2
    assert scraped(metrics, "groupops_consumer_heartbeats_total", answer="granted") >= 3
