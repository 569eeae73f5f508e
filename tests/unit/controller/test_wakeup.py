"""When a policy's loop wakes between ticks: Lease changes the plan depends on, and expiries."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from groupops.controller.identities import observe_lease
from groupops.controller.wakeup import (
    EXPIRY_MARGIN_S,
    RECENT_EXIT_S,
    REPORT_RECHECK_S,
    Wakeup,
    expiry_alarm,
    expiry_due,
    lease_fingerprint,
    next_wake,
)
from groupops.model import MemberId
from groupops.planner.handoff import HeardThrough, LeaseClock


def lease(
    *, holder: str | None = "orders-0/abc", renew: str = "t1", annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": 4, "renewTime": renew}
    if holder is not None:
        spec["holderIdentity"] = holder
    return {
        "metadata": {"name": "orders-orders-0", "annotations": annotations or {}, "resourceVersion": renew},
        "spec": spec,
    }


def test_renewals_do_not_change_the_fingerprint_but_holder_and_report_do() -> None:
    base = lease(annotations={"groupops.dev/acked-epoch": "3", "kubectl.kubernetes.io/x": "1"})
    assert lease_fingerprint(base) == lease_fingerprint({**base, "spec": {**base["spec"], "renewTime": "t2"}})
    assert lease_fingerprint(base) == lease_fingerprint(
        lease(annotations={"groupops.dev/acked-epoch": "3", "kubectl.kubernetes.io/x": "2"})
    )
    assert lease_fingerprint(base) != lease_fingerprint(lease(annotations={"groupops.dev/acked-epoch": "4"}))
    assert lease_fingerprint(base) != lease_fingerprint(
        lease(holder=None, annotations={"groupops.dev/acked-epoch": "3"})
    )


def test_wakeup_fires_once_per_meaningful_change_and_on_deletion() -> None:
    async def scenario() -> list[bool]:
        wakeup = Wakeup()
        seen = [wakeup.note_lease("l", lease())]
        seen.append(await wakeup.wait_until(time.monotonic() + 1.0))
        seen.append(wakeup.note_lease("l", lease(renew="t2")))  # a renewal only
        seen.append(await wakeup.wait_until(time.monotonic() + 0.05))
        seen.append(wakeup.note_lease("l", lease(annotations={"groupops.dev/acked-epoch": "1"})))
        seen.append(wakeup.note_lease("l", None))
        seen.append(await wakeup.wait_until(time.monotonic() + 1.0))  # two changes, one wake
        seen.append(await wakeup.wait_until(time.monotonic() + 0.05))
        return seen

    assert asyncio.run(scenario()) == [True, True, False, False, True, True, True, False]


def test_the_loop_sleeps_until_the_tick_or_just_after_the_next_expiry() -> None:
    clock = LeaseClock()
    assert next_wake(now=0.0, next_tick=5.0, clock=clock, judged_until=0.0) == 5.0
    observe_lease(lease(), clock=clock, now=1.0, duration=10)  # the Lease's own 4 s count
    assert next_wake(now=1.0, next_tick=10.0, clock=clock, judged_until=1.0) == 5.0 + EXPIRY_MARGIN_S
    assert next_wake(now=1.0, next_tick=3.0, clock=clock, judged_until=1.0) == 3.0
    assert not expiry_due(now=5.0, clock=clock, judged_until=1.0)
    assert expiry_due(now=5.0 + EXPIRY_MARGIN_S, clock=clock, judged_until=1.0)
    # judged by a reconcile that started after the expiry: not due again, and no early wake
    assert not expiry_due(now=9.0, clock=clock, judged_until=6.0)
    assert next_wake(now=9.0, next_tick=11.0, clock=clock, judged_until=6.0) == 11.0
    # renewed before the loop woke: the expiry moved, the wake is not due
    observe_lease(lease(renew="t2"), clock=clock, now=4.5, duration=10)
    assert not expiry_due(now=5.1, clock=clock, judged_until=1.0)
    # released (no holder): never expires
    observe_lease(lease(holder=None, renew="t3"), clock=clock, now=6.0, duration=10)
    assert next_wake(now=6.0, next_tick=11.0, clock=clock, judged_until=6.0) == 11.0


def test_an_expiry_the_answerer_has_not_reported_up_to_is_looked_at_again_not_run() -> None:
    """The answering process's report of the expiry moment is late (a starved operator): the
    holder may have been granted meanwhile, so no run is due; the loop looks again shortly, and
    runs once a report covers the moment with no grant in it."""
    through = HeardThrough(0.0)
    clock = LeaseClock()
    clock.follow(through)
    observe_lease(lease(), clock=clock, now=1.0, duration=10)  # expires at 5.0
    through.advance(4.0)
    assert not expiry_due(now=8.0, clock=clock, judged_until=1.0)
    assert next_wake(now=8.0, next_tick=20.0, clock=clock, judged_until=1.0) == 8.0 + REPORT_RECHECK_S
    assert next_wake(now=8.0, next_tick=8.1, clock=clock, judged_until=1.0) == 8.1  # the tick comes first
    assert next_wake(now=3.0, next_tick=20.0, clock=clock, judged_until=1.0) == 5.0 + EXPIRY_MARGIN_S
    through.advance(5.0 + EXPIRY_MARGIN_S)  # covered, and no grant came with it
    assert expiry_due(now=8.0, clock=clock, judged_until=1.0)
    # a report that brings a grant before the moment moves the expiry instead
    through2 = HeardThrough(4.0)
    renewed = LeaseClock()
    renewed.follow(through2)
    observe_lease(lease(), clock=renewed, now=1.0, duration=10)
    renewed.hear(MemberId("orders-orders-0"), 4.5)
    through2.advance(6.0)
    assert not expiry_due(now=8.0, clock=renewed, judged_until=1.0)
    assert next_wake(now=8.0, next_tick=20.0, clock=renewed, judged_until=1.0) == 8.5 + EXPIRY_MARGIN_S


def test_a_stop_ends_the_wait_at_once_without_counting_as_a_wake() -> None:
    async def scenario() -> tuple[bool, float]:
        wakeup = Wakeup()
        stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(stop.set_result, None)
        started = time.monotonic()
        woken = await wakeup.wait_until(started + 30.0, interrupts=(stop,))
        return woken, time.monotonic() - started

    woken, waited = asyncio.run(scenario())
    assert not woken
    assert waited < 30.0


def consumer_pod(
    *, uid: str = "u1", state: dict[str, Any] | None = None, ready: bool = True
) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if state is not None:
        status["containerStatuses"] = [{"name": "consumer", "state": state}]
    return {"metadata": {"name": "orders-0", "uid": uid}, "status": status}


def test_a_consumer_container_that_starts_or_ends_wakes_the_loop_and_nothing_else_of_a_pod_does() -> None:
    async def scenario() -> list[bool]:
        wakeup = Wakeup()
        first = {"running": {"startedAt": "2026-11-29T10:00:00Z"}}
        restarted = {"running": {"startedAt": "2026-11-29T10:05:00Z"}}
        return [
            wakeup.note_pod("orders-0", consumer_pod()),  # scheduled, no container yet
            wakeup.note_pod("orders-0", consumer_pod(state=first)),
            wakeup.note_pod("orders-0", consumer_pod(state=first, ready=False)),  # readiness only
            wakeup.note_pod("orders-0", consumer_pod(state=restarted)),
            wakeup.note_pod("orders-0", consumer_pod(uid="u2", state=restarted)),  # a new pod
            wakeup.note_pod("orders-0", None),
            wakeup.note_pod("orders-0", consumer_pod(uid="u2", state=restarted)),  # seen afresh
        ]

    assert asyncio.run(scenario()) == [False, True, False, True, True, False, True]


def test_a_loop_starting_beside_a_recent_exit_runs_first_and_urgently_and_an_old_one_does_not() -> None:
    """A takeover: the policy whose container ended moments ago (the crash the old leader never
    handled) is woken before its first run; one whose containers started long ago waits its turn.
    Either way its pods are recorded, so the same status seen again by the watch wakes nothing."""
    started = 1_795_000_000.0  # 2026-11-18T11:06:40Z
    ended = {"terminated": {"finishedAt": "2026-11-18T11:06:40Z"}}
    running = {"running": {"startedAt": "2026-11-18T11:06:40Z"}}

    async def scenario(now: float, state: dict[str, Any]) -> tuple[bool, bool, bool]:
        wakeup = Wakeup()
        recent = wakeup.note_pods_at_start([consumer_pod(), consumer_pod(state=state)], now=now)
        return recent, wakeup.event.is_set(), wakeup.note_pod("orders-0", consumer_pod(state=state))

    assert asyncio.run(scenario(started + 3.0, ended)) == (True, True, False)
    assert asyncio.run(scenario(started + RECENT_EXIT_S, running)) == (True, True, False)
    assert asyncio.run(scenario(started + RECENT_EXIT_S + 1.0, running)) == (False, False, False)
    assert asyncio.run(scenario(started + 3.0, {"waiting": {"reason": "ContainerCreating"}})) == (
        False,
        False,
        False,
    )


def test_a_container_start_or_end_is_news_once_and_a_lease_report_is_not() -> None:
    async def scenario() -> list[bool]:
        wakeup = Wakeup()
        state = {"terminated": {"finishedAt": "2026-11-29T10:00:00Z"}}
        wakeup.note_lease("orders-orders-0", lease(annotations={"groupops.dev/epoch": "3"}))
        after_lease = wakeup.take_container_news()
        wakeup.note_pod("orders-0", consumer_pod(state=state))
        after_exit = wakeup.take_container_news()
        taken_again = wakeup.take_container_news()
        wakeup.note_pod("orders-0", consumer_pod(state=state))  # the same status seen again
        after_repeat = wakeup.take_container_news()
        return [after_lease, after_exit, taken_again, after_repeat]

    assert asyncio.run(scenario()) == [False, True, False, False]


LIFETIME_S = 0.3


def test_the_expiry_alarm_waits_while_heartbeats_move_the_expiry_and_fires_once_they_stop() -> None:
    """A parked loop's alarm (`expiry_alarm`): heartbeats every 0.1 s keep a 0.3 s Lease alive for
    a second, with the alarm never resolved; once they stop it resolves just after the last one's
    expiry, as a loop sleeping to `next_wake` would have run."""
    identity = MemberId("orders-0")

    async def scenario() -> tuple[bool, float, float]:
        clock = LeaseClock()
        clock.observe(identity, "v1", time.monotonic(), lifetime=LIFETIME_S)
        alarm = expiry_alarm(clock, judged_until=time.monotonic())
        for _ in range(10):
            await asyncio.sleep(0.1)
            clock.hear(identity, time.monotonic())
        alive = not alarm.done()
        last = clock.heard_at(identity) or 0.0
        await asyncio.wait_for(alarm, timeout=2.0)
        return alive, time.monotonic() - last, last

    alive, fired_after, _ = asyncio.run(scenario())
    assert alive, "the alarm resolved while heartbeats kept the Lease alive"
    assert LIFETIME_S + EXPIRY_MARGIN_S <= fired_after < LIFETIME_S + EXPIRY_MARGIN_S + 0.5


def test_the_expiry_alarm_waits_for_the_answerers_report_and_stops_when_cancelled() -> None:
    identity = MemberId("orders-0")

    errors: list[dict[str, Any]] = []

    async def scenario() -> tuple[bool, bool, bool, bool]:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: errors.append(context))
        through = HeardThrough(time.monotonic())
        clock = LeaseClock()
        clock.follow(through)
        clock.observe(identity, "v1", time.monotonic(), lifetime=0.1)
        alarm = expiry_alarm(clock, judged_until=time.monotonic())
        await asyncio.sleep(0.4)  # past the expiry, but the answerer has not reported that far
        waited_for_report = not alarm.done()
        through.advance(time.monotonic())
        await asyncio.wait_for(alarm, timeout=REPORT_RECHECK_S + 1.0)
        nobody = LeaseClock()  # no held Lease: nothing can expire
        idle = expiry_alarm(nobody, judged_until=time.monotonic())
        await asyncio.sleep(0.2)
        idle_waits = not idle.done()
        idle.cancel()
        held = LeaseClock()
        held.observe(identity, "v1", time.monotonic(), lifetime=0.1)
        cancelled = expiry_alarm(held, judged_until=time.monotonic())
        cancelled.cancel()
        await asyncio.sleep(0.3)  # its timer would have resolved it by now
        return waited_for_report, alarm.done(), idle_waits, cancelled.cancelled()

    assert asyncio.run(scenario()) == (True, True, True, True)
    assert errors == [], "a cancelled alarm's timer still ran"
