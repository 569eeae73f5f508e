"""Damping: when a lag-driven replan is worth publishing, and autoscale's stabilisation windows.

Stage: pure planner core, as HPA's `behavior` is for pods. The controller's plan step
(`controller/decide.py`) calls `damp` when the triggers that keep the plan correct found
nothing; its autoscale (`decide.autoscaled_replicas`) calls `stabilize` and `record`. No
clock and no I/O: the caller passes the times and keeps `DampingMemory` in the policy's memory
(lost on restart or leader change: docs/design.md §6.5 says what that costs).

What is damped. Triggers that keep the plan correct are never damped: `Initial`, `SpecChanged`,
`MembershipChanged` (joins, leaves, expiry, i.e. failover, and drains), `PartitionsChanged` and
`Handoff`.
`CountsUneven` (partition counts outside the fair share, what a move budget left of such a
change) waits for the cooldown only. The lag-driven triggers, `ImbalanceExceeded` and
`Interval`, publish only when all of these hold, in this order:

1. *A trigger, with hysteresis* (`lag_trigger`). `ImbalanceExceeded`: the published plan's
   imbalance (max member lag over its lower bound) is above `imbalance_threshold` and the trigger
   is armed. A lag-driven plan published with its imbalance still above `rearm_below` (threshold
   x (1 - min_improvement), at least 1.0) disarms it until the published plan's imbalance is back
   at or below that (`rearmed`). Else `TimeLagAboveGoal` while the group is further behind than
   its time-lag goal. Else `Interval`, a re-evaluation period: due once `interval_seconds` have
   passed since the last published plan and since the last evaluation, unless that evaluation
   held the very same figures (published plan and new plan under the lag) as too little: the
   verdict on them would be the same again.
2. *The cooldown* (`judge`): at least `cooldown_seconds` since the last published plan
   (status.lastRebalance; unknown counts as long ago).
3. *Enough improvement* (`judge`): the new plan's max member lag is below the published plan's,
   under the same lag, by at least `min_improvement` of it. Both plans have the same lower bound,
   so this is the same fraction of the imbalance. A plan no better never passes, even at 0.

Worked example (threshold 1.2, min_improvement 0.1 so re-armed at or below 1.08, cooldown 30 s):
the published plan's imbalance reads 1.32 and the new plan's 1.05, 40 s after the last plan:
armed and above 1.2, so `ImbalanceExceeded`; 40 s >= 30 s; (1.32 - 1.05) / 1.32 = 20 % >= 10 %:
published, and 1.05 <= 1.08 keeps it armed. Ten seconds later the lag moved: the plan reads 1.25
and a new one 1.10: held by the cooldown (10 s < 30 s). At 35 s it reads 1.25 and a new one 1.16:
held, 7 % < 10 %. So over any stretch of T seconds at most T / cooldown + 1 lag-driven plans are
published, however the lag moves.

Autoscale (`stabilize`), HPA's stabilisation windows: each run with fresh lag recommends
clamp(ceil(total lag / targetLagPerReplica), min, max); the count goes up only to the lowest
recommendation within the scale-up window and down only to the highest within the scale-down
window (0 s up: at once; 300 s down: slowly). A memory that saw no recommendation yet (operator
restart, new leader) counts the unknown past as having recommended the current count, so it
neither scales down nor (with an up window) up until a window of its own has passed.

`damp` is the whole decision for one run, rules 1 to 3 over `TriggerState`; the others are its
parts, exported for their tests.
"""

from __future__ import annotations

import enum
import functools
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from groupops.model import TopicPartition
from groupops.planner.target import Trigger

__all__ = [
    "COOLDOWN_ONLY",
    "LAG_DRIVEN",
    "Damped",
    "DampingMemory",
    "DampingSettings",
    "Figures",
    "Hold",
    "Recommendation",
    "ScaleWindows",
    "TriggerState",
    "Verdict",
    "count_shortfall",
    "damp",
    "improvement",
    "judge",
    "lag_trigger",
    "rearmed",
    "record",
    "stabilize",
]

LAG_DRIVEN = frozenset({Trigger.IMBALANCE, Trigger.TIME_LAG_ABOVE_GOAL, Trigger.INTERVAL})
"""Triggers whose plan only lowers lag: damped by all three rules."""

COOLDOWN_ONLY = frozenset({Trigger.COUNTS_UNEVEN})
"""Triggers that finish a change: they wait for the cooldown, not for an improvement in lag."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DampingSettings:
    """spec.rebalance as damping reads it. imbalance_threshold: math.inf turns the imbalance
    trigger off (failover); min_improvement: a fraction in [0, 1); times in seconds."""

    imbalance_threshold: float = 1.2
    min_improvement: float = 0.1
    cooldown_seconds: float = 30.0
    interval_seconds: float = 60.0

    @property
    def rearm_below(self) -> float:
        """The imbalance at or below which the imbalance trigger is armed again (hysteresis)."""
        return max(1.0, self.imbalance_threshold * (1.0 - self.min_improvement))


class Hold(enum.Enum):
    """Why a damped trigger published nothing (logged; the published plan stays)."""

    COOLDOWN = "Cooldown"
    TOO_LITTLE = "ImprovementTooSmall"


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """`publish` or the `hold` that stopped it; `improvement` as `improvement()` computed it."""

    publish: bool
    hold: Hold | None = None
    improvement: float = 0.0

    def describe(self, trigger: Trigger, settings: DampingSettings, since: float | None) -> str:
        if self.hold is Hold.COOLDOWN:
            return (
                f"{trigger.value} held: {since or 0:.0f} s since the last plan, "
                f"cooldown {settings.cooldown_seconds:g} s"
            )
        return (
            f"{trigger.value} held: the new plan improves max member lag by {self.improvement:.1%}, "
            f"less than minImprovement {settings.min_improvement:.0%}"
        )


def improvement(before_max: float, after_max: float) -> float:
    """Relative fall of the max member lag, (before - after) / before; 0.0 when before is 0
    (nothing lags: nothing to improve). Negative when the new plan is worse."""
    return (before_max - after_max) / before_max if before_max > 0 else 0.0


def lag_trigger(
    *,
    imbalance: float,
    armed: bool,
    settings: DampingSettings,
    seconds_since_rebalance: float | None,
    seconds_since_evaluation: float | None,
    over_goal: bool = False,
) -> Trigger | None:
    """Rule 1: `ImbalanceExceeded` (armed and above the threshold), else `TimeLagAboveGoal` (the
    group's time lag is above spec.targetTimeLagSeconds: a better plan is worth the cooldown and
    the improvement rules whatever the imbalance), else `Interval` when the re-evaluation period
    is due, else None. None for the times means never (long ago)."""
    if armed and imbalance > settings.imbalance_threshold:
        return Trigger.IMBALANCE
    if over_goal:
        return Trigger.TIME_LAG_ABOVE_GOAL
    period = settings.interval_seconds
    if _at_least(seconds_since_rebalance, period) and _at_least(seconds_since_evaluation, period):
        return Trigger.INTERVAL
    return None


def judge(
    *,
    trigger: Trigger,
    before_max: float,
    after_max: float,
    seconds_since_rebalance: float | None,
    settings: DampingSettings,
) -> Verdict:
    """Rules 2 and 3 for `trigger`: whether its plan (max member lag `after_max`, the published
    plan's `before_max` under the same lag) may be published now. Correctness triggers always
    may; `COOLDOWN_ONLY` ones after the cooldown; `LAG_DRIVEN` ones after the cooldown and with
    enough improvement."""
    gain = improvement(before_max, after_max)
    if trigger not in LAG_DRIVEN and trigger not in COOLDOWN_ONLY:
        return Verdict(publish=True, improvement=gain)
    # A last plan stamped in the future (a writer's clock ahead of ours) counts as just now.
    since = None if seconds_since_rebalance is None else max(0.0, seconds_since_rebalance)
    if not _at_least(since, settings.cooldown_seconds):
        return Verdict(publish=False, hold=Hold.COOLDOWN, improvement=gain)
    if trigger in LAG_DRIVEN and (gain <= 0.0 or gain < settings.min_improvement):
        return Verdict(publish=False, hold=Hold.TOO_LITTLE, improvement=gain)
    return Verdict(publish=True, improvement=gain)


def rearmed(*, armed: bool, imbalance: float, settings: DampingSettings) -> bool:
    """The imbalance trigger's state before this run's decision: armed again once the published
    plan's imbalance is at or below `rearm_below`."""
    return armed or imbalance <= settings.rearm_below


def _at_least(seconds: float | None, limit: float) -> bool:
    return seconds is None or seconds >= limit


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    """A plan's figures under the lag just read (`assign.stats`)."""

    imbalance: float
    max_member_lag: float


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerState:
    """What rule 1 remembers between runs: the hysteresis, when the interval last evaluated
    (wall-clock seconds; None: not since this memory began), and the figures (published plan,
    new plan) that evaluation held as too little an improvement (None: it was not held so)."""

    armed: bool = True
    evaluated_at: float | None = None
    held_on: tuple[Figures, Figures] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Damped:
    """One run's damped decision. `trigger`: publish a plan for it (None: keep the published
    plan); `candidate` and `verdict`: what was judged and how (None: nothing was due).
    `state`: the trigger state once the plan is published (or now, when there is none to
    publish); `unpublished`: when a plan for `trigger` is not published after all (a proposal
    waiting for approval must stand at the next run, so nothing is used up)."""

    trigger: Trigger | None
    candidate: Trigger | None = None
    verdict: Verdict | None = None
    state: TriggerState
    unpublished: TriggerState
    quiet_s: float = 0.0
    """Seconds from `now` during which a run on the same figures, from `state`, decides no
    trigger and leaves `state` as it is (0 when this one publishes; `math.inf`: until the
    figures change). A policy whose inputs do not change may skip its runs until then
    (`controller.settled`)."""


def damp(
    *,
    state: TriggerState,
    before: Figures,
    after: Figures | Callable[[], Figures],
    counts_nearer: bool,
    seconds_since_rebalance: float | None,
    now: float,
    settings: DampingSettings,
    over_goal: bool = False,
) -> Damped:
    """The damped triggers of one run, called only when no correctness trigger fired. `before`:
    the published plan under the lag just read; `after`: the new target's, or how to get them:
    they are asked for only when the outcome depends on them (a candidate to judge, or figures
    held as too little equal to `before`), so a run with nothing to judge need not compute the
    target (docs/design.md §8.5); `counts_nearer`: the target brings partition counts nearer the
    fair share (`count_shortfall`), what a move budget left of a change. In order: re-arm
    (`rearmed`); the candidate, `CountsUneven` or `lag_trigger`'s (an interval on the figures it
    last held as too little is not due); `judge`; then the state: an interval evaluation that
    found too little is used up (the next one is an interval on, on other figures), and so is a
    published lag-driven plan, which also disarms the imbalance trigger when its imbalance stays
    above `rearm_below`."""
    target_figures = _once(after)
    base = replace(state, armed=rearmed(armed=state.armed, imbalance=before.imbalance, settings=settings))
    candidate = (
        Trigger.COUNTS_UNEVEN
        if counts_nearer
        else lag_trigger(
            imbalance=before.imbalance,
            armed=base.armed,
            settings=settings,
            seconds_since_rebalance=seconds_since_rebalance,
            seconds_since_evaluation=None if base.evaluated_at is None else now - base.evaluated_at,
            over_goal=over_goal,
        )
    )

    def quiet(state: TriggerState) -> float:
        return _quiet_for(
            state=state,
            before=before,
            after=target_figures,
            counts_nearer=counts_nearer,
            over_goal=over_goal,
            seconds_since_rebalance=seconds_since_rebalance,
            now=now,
            settings=settings,
        )

    if candidate is Trigger.INTERVAL and _held_on(base, before, target_figures):
        # Judged on these very figures and held as too little: the same verdict again (the
        # cooldown had passed then, and it only moves further away).
        candidate = None
    if candidate is None:
        return Damped(trigger=None, state=base, unpublished=base, quiet_s=quiet(base))
    after_figures = target_figures()
    verdict = judge(
        trigger=candidate,
        before_max=before.max_member_lag,
        after_max=after_figures.max_member_lag,
        seconds_since_rebalance=seconds_since_rebalance,
        settings=settings,
    )
    evaluated = replace(base, evaluated_at=now) if candidate is Trigger.INTERVAL else base
    if not verdict.publish:
        held = base
        if verdict.hold is Hold.TOO_LITTLE:
            held = (
                replace(evaluated, held_on=(before, after_figures))
                if candidate is Trigger.INTERVAL
                else evaluated
            )
        quiet_s = quiet(held)
        return Damped(
            trigger=None, candidate=candidate, verdict=verdict, state=held, unpublished=held, quiet_s=quiet_s
        )
    published = replace(evaluated, held_on=None)
    if candidate in LAG_DRIVEN and after_figures.imbalance > settings.rearm_below:
        published = replace(published, armed=False)
    return Damped(trigger=candidate, candidate=candidate, verdict=verdict, state=published, unpublished=base)


def _once(after: Figures | Callable[[], Figures]) -> Callable[[], Figures]:
    """`after` as a call that computes the figures at most once."""
    return (lambda: after) if isinstance(after, Figures) else functools.cache(after)


def _held_on(state: TriggerState, before: Figures, after: Callable[[], Figures]) -> bool:
    """`state.held_on == (before, after)`, asking for the target's figures only when the
    published plan's are the ones held (a busy group's lag moves them at every read)."""
    return state.held_on is not None and state.held_on[0] == before and state.held_on[1] == after()


def _quiet_for(
    *,
    state: TriggerState,
    before: Figures,
    after: Callable[[], Figures],
    counts_nearer: bool,
    over_goal: bool,
    seconds_since_rebalance: float | None,
    now: float,
    settings: DampingSettings,
) -> float:
    """`Damped.quiet_s` of a run that publishes nothing and leaves `state`. Time enters `damp`
    twice: the cooldown, which holds every candidate until it ends (`judge`), and the interval's
    evaluation, which comes due (`lag_trigger`) unless a candidate the figures raise comes first
    (counts nearer the fair share, the imbalance trigger armed and above its threshold, the group
    behind its time-lag goal): on the same figures that candidate comes first again, and once
    past the cooldown its verdict is the same at every run. Nor does the interval come due on
    the figures its last evaluation held as too little (`TriggerState.held_on`)."""
    waits = [math.inf]
    if seconds_since_rebalance is not None and seconds_since_rebalance < settings.cooldown_seconds:
        waits.append(settings.cooldown_seconds - max(0.0, seconds_since_rebalance))
    raised = counts_nearer or over_goal or (state.armed and before.imbalance > settings.imbalance_threshold)
    if not raised and not _held_on(state, before, after):
        since_evaluation = None if state.evaluated_at is None else now - state.evaluated_at
        interval_in = max(
            0.0 if since is None else settings.interval_seconds - since
            for since in (seconds_since_rebalance, since_evaluation)
        )
        waits.append(max(0.0, interval_in))
    return min(waits)


def count_shortfall(
    assignment: Mapping[str, Sequence[TopicPartition]], members: Collection[str], topics: Mapping[str, int]
) -> int:
    """Partitions by which members' counts fall outside the fair band: each of `members` should
    hold between sum(n // k) and sum(ceil(n / k)) over the topics' counts n (k members). Every
    strategy but `failover` stays in the band whatever the lag (per topic within one, as `range`
    and `lag` do, or overall within one, as the others do), so a plan outside it is a change the
    move budget cut short. Partitions that do not exist and identities not in `members` are left
    out. Example: 2 topics of 3 partitions, 2 members: band [2, 4]; counts 6 and 0 fall short by 2."""
    k = len(members)
    if k == 0:
        return 0
    low = sum(n // k for n in topics.values())
    high = sum(-(-n // k) for n in topics.values())
    counts = Counter(
        identity
        for identity, partitions in assignment.items()
        if identity in members
        for tp in partitions
        if tp.partition < topics.get(tp.topic, 0)
    )
    return sum(max(0, low - counts[m]) + max(0, counts[m] - high) for m in members)


# -- autoscale ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleWindows:
    """spec.consumers.autoscale.behavior: stabilisation windows in seconds (HPA's defaults)."""

    up_seconds: float = 0.0
    down_seconds: float = 300.0


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The replica count the lag asked for at wall-clock second `at`."""

    at: float
    replicas: int


def stabilize(
    *,
    recommended: int,
    current: int | None,
    history: Iterable[Recommendation],
    now: float,
    windows: ScaleWindows,
) -> int:
    """HPA's `stabilizeRecommendationWithBehaviors`: up to at most the lowest recommendation
    seen within the up window, down to at least the highest within the down window, else stay.
    `history` excludes this run's `recommended`; an entry counts while `at` is after
    now - window (so a window of 0 sees only this run). `current` None (nothing runs yet): the
    recommendation as it is.

    Example (down window 300 s): recommendations 5 at t=0 and 2 at t=100, current 5: at t=100
    the highest within 300 s is 5, so 5 stays; at t=301 only the 2 is left: 2."""
    if current is None:
        return recommended
    up = down = recommended
    for past in history:
        if past.at > now - windows.up_seconds:
            up = min(up, past.replicas)
        if past.at > now - windows.down_seconds:
            down = max(down, past.replicas)
    return min(max(current, up), down)


def record(
    history: Sequence[Recommendation], recommendation: Recommendation, windows: ScaleWindows
) -> tuple[Recommendation, ...]:
    """`history` with `recommendation` added and what no window can see any more dropped."""
    oldest = recommendation.at - max(windows.up_seconds, windows.down_seconds)
    return (*(past for past in history if past.at > oldest), recommendation)


@dataclass
class DampingMemory:
    """What damping keeps between runs of one policy, in `PolicyMemory`. Lost on operator restart
    and leader change, and then conservative: the imbalance trigger starts armed (the cooldown,
    read from status, still holds), the interval evaluates at its next due time, the autoscale
    history starts from the current count (see the module docstring), and a spec change counts
    as `SpecChanged` until its generation has been seen by this memory."""

    triggers: TriggerState = field(default_factory=TriggerState)
    """Rule 1's hysteresis and last interval evaluation (`damp`)."""
    recommendations: tuple[Recommendation, ...] | None = None
    """Autoscale's recent recommendations; None: none yet since this memory began."""
    plan_digests: dict[int, str] = field(default_factory=dict)
    """Policy generation -> digest of what of its spec the target depends on (`decide`): a new
    generation whose digest equals the published plan's changed only lag readings or damping."""

    def remember_digest(self, generation: int, digest: str, *, keep: int = 8) -> None:
        self.plan_digests[generation] = digest
        for old in sorted(self.plan_digests)[:-keep]:
            del self.plan_digests[old]
