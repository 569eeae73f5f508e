"""A clock fed by a source that reports late (the answering process, docs/design.md §7.5 "silence
is judged only as far as the answerer has reported"): it judges no silence beyond the source's
last report, so a holder heard before that moment but reported after it is never judged expired,
and a holder silent up to the report is judged as without the source."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from groupops.model import MemberId
from groupops.planner.handoff import HeardThrough, LeaseClock

HOLDER = MemberId("orders-0")
DURATION_S = 4.0


def test_a_late_report_holds_the_judgement_back_and_a_report_that_covers_it_allows_it() -> None:
    through = HeardThrough()
    clock = LeaseClock()
    clock.follow(through)
    clock.observe(HOLDER, "1", now=100.0, lifetime=DURATION_S)
    through.advance(100.0)
    assert clock.judged_through(110.0) == 100.0
    assert clock.unchanged_for(HOLDER, now=110.0) == 0.0
    assert not clock.expired(HOLDER, now=110.0, duration_s=DURATION_S)
    through.advance(103.9)
    assert not clock.expired(HOLDER, now=110.0, duration_s=DURATION_S)
    through.advance(104.0)
    assert clock.expired(HOLDER, now=110.0, duration_s=DURATION_S)
    through.advance(90.0)  # an older moment never moves it back
    assert through.moment == 104.0
    clock.follow(None)  # no late source: judged up to now
    assert clock.unchanged_for(HOLDER, now=110.0) == 10.0


def test_before_the_first_report_nothing_is_silent() -> None:
    clock = LeaseClock()
    clock.follow(HeardThrough())
    clock.hear(HOLDER, 5.0)
    assert clock.unchanged_for(HOLDER, now=1_000.0) == 0.0
    assert not clock.expired(HOLDER, now=1_000.0, duration_s=DURATION_S)


@given(
    grants=st.lists(st.floats(0.0, 100.0), min_size=1, max_size=30),
    report_delay=st.floats(0.0, 20.0),
    asked_at=st.floats(0.0, 130.0),
)
def test_a_holder_granted_within_its_duration_is_never_judged_expired_whatever_the_report_delay(
    grants: list[float], report_delay: float, asked_at: float
) -> None:
    """Grants at `grants`, each reported `report_delay` late (reports in order: a report taken at
    `s` carries every grant up to `s`, applied at `s + report_delay`). Whenever the clock judges
    the holder expired at `asked_at`, it really was silent for the duration before a moment the
    reports had covered; and once the reports cover a silence of the duration, it is judged."""
    through = HeardThrough()
    clock = LeaseClock()
    clock.follow(through)
    applied_by = asked_at - report_delay  # the newest report applied was taken then
    for grant in sorted(grants):
        if grant <= applied_by:
            clock.hear(HOLDER, grant)
    through.advance(applied_by)
    last_reported = max((g for g in grants if g <= applied_by), default=None)
    expired = clock.expired(HOLDER, now=asked_at, duration_s=DURATION_S)
    if last_reported is None:
        assert not expired
        return
    silent_until_covered = min(asked_at, applied_by) - last_reported
    assert expired == (silent_until_covered >= DURATION_S)
    if expired:
        later = [g for g in grants if g > last_reported]
        assert all(g >= last_reported + DURATION_S for g in later), "a grant within the duration was missed"
