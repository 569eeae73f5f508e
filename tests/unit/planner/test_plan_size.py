"""Plans and Lease notes at 100,000 partitions fit the Kubernetes limits, with the real encoders:
one topic and 1,000 topics, partitions dealt round robin (no runs, the worst case for the compact
form) and in contiguous ranges, with 10 % of them pending release. Beyond the sizes that fit, the
checks say which limit and what to do."""

from __future__ import annotations

import pytest

from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner import plan_size
from groupops.planner.plan_format import RELEASING_ANNOTATION, PublishedPlan, Release, plan_to_configmap
from groupops.planner.plan_size import (
    ANNOTATIONS_BUDGET_BYTES,
    ANNOTATIONS_LIMIT_BYTES,
    CONFIGMAP_DATA_LIMIT_BYTES,
    LEASE_NOTE_BUDGET_BYTES,
    PLAN_DATA_BUDGET_BYTES,
    annotations_size,
    data_size,
    lease_note_problem,
    lease_note_size,
    plan_configmap_problem,
)

IDENTITIES = [MemberId(f"orders-processor-{i}") for i in range(10)]
ONE_TOPIC = [TopicPartition("orders", p) for p in range(100_000)]
THOUSAND_TOPICS = [TopicPartition(f"topic-{t:04d}", p) for t in range(1000) for p in range(100)]


def published(
    partitions: list[TopicPartition], *, interleaved: bool, pending_every: int = 10
) -> PublishedPlan:
    """Every `pending_every`-th partition pending release (from an identity and one of two epochs
    in turn); the others dealt to IDENTITIES round robin (`interleaved`) or in contiguous ranges."""
    pending = {
        tp: Release(identity=IDENTITIES[k % 10], epoch=41 + k % 2, since=1_700_000_000.125 + k % 2)
        for k, tp in enumerate(partitions[::pending_every])
    }
    owned = [tp for tp in partitions if tp not in pending]
    share = -(-len(owned) // len(IDENTITIES))
    assignment: dict[MemberId, list[TopicPartition]] = {identity: [] for identity in IDENTITIES}
    for j, tp in enumerate(owned):
        assignment[IDENTITIES[j % 10] if interleaved else IDENTITIES[j // share]].append(tp)
    plan = Plan(epoch=42, strategy="lag", assignment={m: tuple(tps) for m, tps in assignment.items()})
    return PublishedPlan(plan=plan, releasing=pending)


def operator_annotations(parts_annotations: dict[str, str]) -> dict[str, str]:
    """What the operator adds to the plan ConfigMap (controller/render_plan.py), at full size."""
    return {
        **parts_annotations,
        "groupops.dev/policy-generation": "123",
        "groupops.dev/members": ",".join(IDENTITIES),
        "groupops.dev/plan-digest": "0" * 64,
    }


@pytest.mark.parametrize(
    "interleaved", [pytest.param(True, id="round robin"), pytest.param(False, id="ranges")]
)
@pytest.mark.parametrize(
    "partitions", [pytest.param(ONE_TOPIC, id="1 topic"), pytest.param(THOUSAND_TOPICS, id="1,000 topics")]
)
def test_100k_partitions_over_10_replicas_fit_with_10_percent_pending(
    partitions: list[TopicPartition], interleaved: bool
) -> None:
    plan = published(partitions, interleaved=interleaved)
    assert len(plan.releasing) == 10_000
    assert sum(len(tps) for tps in plan.plan.assignment.values()) == 90_000
    parts = plan_to_configmap(plan)
    annotations = operator_annotations(dict(parts["annotations"]))

    assert plan_configmap_problem(parts["data"], annotations) is None
    assert data_size(parts["data"]) <= PLAN_DATA_BUDGET_BYTES
    assert annotations_size(annotations) <= ANNOTATIONS_BUDGET_BYTES
    for partitions_of_one in plan.plan.assignment.values():
        assert len(partitions_of_one) == 9_000
        assert lease_note_problem(partitions_of_one) is None


@pytest.mark.parametrize(
    "interleaved", [pytest.param(True, id="round robin"), pytest.param(False, id="ranges")]
)
def test_a_replica_owning_10k_of_100k_partitions_has_a_note_that_fits(interleaved: bool) -> None:
    partitions = ONE_TOPIC[0::10] if interleaved else ONE_TOPIC[:10_000]
    assert lease_note_size(partitions) <= LEASE_NOTE_BUDGET_BYTES
    assert lease_note_problem(partitions) is None


def test_100k_scattered_partitions_on_one_replica_do_not_fit_its_lease_and_the_check_says_so() -> None:
    every_other = [TopicPartition("orders", 2 * p) for p in range(100_000)]
    problem = lease_note_problem(every_other)
    assert problem is not None
    assert "100,000 partitions" in problem
    assert f"{ANNOTATIONS_LIMIT_BYTES:,} bytes (256 KiB)" in problem
    assert "run more replicas" in problem


def test_a_lease_note_stops_fitting_near_40k_scattered_partitions() -> None:
    def every_other(count: int) -> list[TopicPartition]:
        return [TopicPartition("orders", 2 * p) for p in range(count)]

    assert lease_note_problem(every_other(40_000)) is None
    assert lease_note_problem(every_other(41_000)) is not None
    # The same partitions in one run take a few bytes however many there are.
    assert lease_note_problem(ONE_TOPIC) is None


def test_a_plan_stops_fitting_near_150k_partitions_dealt_round_robin() -> None:
    def round_robin(count: int) -> dict[str, str]:
        assignment = {
            m: tuple(TopicPartition("orders", p) for p in range(i, count, 10))
            for i, m in enumerate(IDENTITIES)
        }
        return plan_to_configmap(
            PublishedPlan(plan=Plan(epoch=1, strategy="roundrobin", assignment=assignment))
        )["data"]

    assert plan_configmap_problem(round_robin(150_000), {}) is None
    problem = plan_configmap_problem(round_robin(151_000), {})
    assert problem is not None
    assert f"{CONFIGMAP_DATA_LIMIT_BYTES:,} bytes (1 MiB)" in problem
    assert "more policies" in problem


def test_pending_releases_stop_fitting_near_40k_and_the_check_names_the_annotation() -> None:
    def pending(count: int) -> dict[str, str]:
        releasing = {
            TopicPartition("orders", 2 * k): Release(identity=IDENTITIES[k % 10], epoch=7, since=1.5)
            for k in range(count)
        }
        plan = PublishedPlan(plan=Plan(epoch=8, strategy="lag", assignment={}), releasing=releasing)
        return dict(plan_to_configmap(plan)["annotations"])

    assert plan_configmap_problem({"epoch": "8"}, pending(40_000)) is None
    problem = plan_configmap_problem({"epoch": "8"}, pending(41_000))
    assert problem is not None
    assert f"the largest, {RELEASING_ANNOTATION}" in problem
    assert "256 KiB" in problem
    assert "move fewer partitions at once" in problem


def test_a_plan_whose_replica_could_not_report_its_set_is_refused() -> None:
    # 60,000 scattered partitions for one identity: the data fits 1 MiB, its Lease note does not.
    assignment = {
        IDENTITIES[0]: tuple(TopicPartition("orders", 2 * p) for p in range(60_000)),
        IDENTITIES[1]: (),
    }
    parts = plan_to_configmap(PublishedPlan(plan=Plan(epoch=3, strategy="lag", assignment=assignment)))
    assert data_size(parts["data"]) <= PLAN_DATA_BUDGET_BYTES
    problem = plan_configmap_problem(parts["data"], parts["annotations"])
    assert problem is not None
    assert "identity orders-processor-0, owning 60,000 partitions" in problem


def test_thousands_of_identities_meet_the_etcd_request_limit() -> None:
    # Keys do not count against the data limit but do in the stored object.
    data = {"epoch": "1", "strategy": "lag"} | {f"{'x' * 200}-{i}": "[]" for i in range(7_000)}
    problem = plan_configmap_problem(data, {})
    assert problem is not None
    assert "etcd" in problem
    assert "1,572,864 bytes (1.5 MiB" in problem


def test_sizes_count_utf8_bytes_as_the_api_server_does() -> None:
    assert data_size({"k": "é"}) == 2
    assert annotations_size({"ké": "é"}) == 5


def test_the_limits_are_those_of_kubernetes_and_etcd() -> None:
    assert plan_size.CONFIGMAP_DATA_LIMIT_BYTES == 1_048_576
    assert plan_size.ANNOTATIONS_LIMIT_BYTES == 262_144
    assert plan_size.ETCD_REQUEST_LIMIT_BYTES == 1_572_864
    assert set(plan_size.__all__) >= {"plan_configmap_problem", "lease_note_problem"}
