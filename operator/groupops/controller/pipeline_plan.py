"""A plan the Spark pipeline computed, handed to a policy as a proposal (`groupops propose`).

Stage: controller, pure. `groupops propose --plan DIR --execute` writes the plan job's
assignment for a policy's group into the policy's annotation `groupops.dev/pipeline-plan`; the
plan step (`decide`) of a policy with `approval: manual` reads it here and proposes it (trigger
`PipelinePlan`) until `spec.rebalance.approvedProposal` names the proposal, as any proposal. An
annotation whose plan does not fit the policy now (an identity that does not take part, a
partition missing, twice or unknown) is refused with the reason and the operator's own planning
goes on; once published, `status.pipelinePlanApplied` keeps its id and it is never proposed again
(docs/design.md §10, "plans from the pipeline").

The annotation (JSON): {"id": "...", "assignment": {identity: ["topic-partition", ...]},
"source": "where the plan came from", "createdAt": "RFC 3339"}.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from groupops.model import TopicPartition

__all__ = ["PIPELINE_PLAN_ANNOTATION", "PipelinePlan", "annotation_for", "pipeline_plan"]

PIPELINE_PLAN_ANNOTATION = "groupops.dev/pipeline-plan"
MAX_ANNOTATION_BYTES = 200_000
"""Annotations of an object share 256 KiB; a bigger plan is refused by `groupops propose`."""


@dataclass(frozen=True, slots=True)
class PipelinePlan:
    """A usable pipeline plan (`entries` for every identity) or why it is refused (`problem`)."""

    id: str
    source: str
    entries: dict[str, tuple[TopicPartition, ...]] | None = None
    problem: str | None = None


def annotation_for(
    assignment: Mapping[str, Sequence[TopicPartition]], *, source: str, created_at: str
) -> str:
    """The annotation's value for `assignment`; its id is a digest of the assignment, so the same
    plan written twice is one proposal."""
    shown = {identity: [str(tp) for tp in sorted(tps)] for identity, tps in sorted(assignment.items())}
    digest = hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()[:12]
    return json.dumps(
        {"id": f"pp-{digest}", "assignment": shown, "source": source, "createdAt": created_at}, sort_keys=True
    )


def pipeline_plan(
    annotations: Mapping[str, Any] | None,
    *,
    members: Collection[str],
    everyone: Collection[str],
    topics: Mapping[str, int],
    applied: str | None,
) -> PipelinePlan | None:
    """The policy's pipeline plan: None without the annotation or when `applied` (its id was
    published already); else the plan over `everyone` (identities not in it get nothing), or the
    reason it cannot be used: an identity outside `members` (those taking part now), a partition
    not in `topics`, given twice, or left out."""
    raw = (annotations or {}).get(PIPELINE_PLAN_ANNOTATION)
    if raw is None:
        return None
    try:
        document = json.loads(raw)
        ident, source, assignment = (
            str(document["id"]),
            str(document.get("source", "")),
            document["assignment"],
        )
        if not isinstance(assignment, Mapping):
            raise TypeError("assignment is not an object")
        parsed = {
            str(identity): [_partition(item) for item in items] for identity, items in assignment.items()
        }
    except (ValueError, KeyError, TypeError) as e:
        return PipelinePlan(
            id="?", source="", problem=f"not a pipeline plan ({e}): write it with groupops propose"
        )
    if ident == applied:
        return None
    plan = PipelinePlan(id=ident, source=source)
    strangers = sorted(set(parsed) - set(members))
    if strangers:
        return _refused(plan, f"{', '.join(strangers)} does not take part in the group now")
    seen: set[TopicPartition] = set()
    for identity, partitions in parsed.items():
        for tp in partitions:
            if tp.topic not in topics or not 0 <= tp.partition < topics[tp.topic]:
                return _refused(plan, f"{tp} (of {identity}) is not a partition of the policy's topics")
            if tp in seen:
                return _refused(plan, f"{tp} is given twice")
            seen.add(tp)
    missing = [TopicPartition(t, p) for t, n in sorted(topics.items()) for p in range(n)]
    missing = [tp for tp in missing if tp not in seen]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        return _refused(plan, f"it leaves out {', '.join(map(str, missing[:3]))}{more}")
    entries = {identity: tuple(sorted(parsed.get(identity, ()))) for identity in everyone}
    return PipelinePlan(id=ident, source=source, entries=entries)


def _partition(item: Any) -> TopicPartition:
    topic, _, number = str(item).rpartition("-")  # the partition is the last "-<digits>"
    if not topic or not number.isdigit():
        raise ValueError(f"{item!r} is not topic-partition")
    return TopicPartition(topic, int(number))


def _refused(plan: PipelinePlan, why: str) -> PipelinePlan:
    return PipelinePlan(
        id=plan.id,
        source=plan.source,
        problem=f"the pipeline plan {plan.id} ({plan.source}) is not used: {why}",
    )
