"""`delivery: native`: does the broker's actual assignment equal the operator's prediction?

With native delivery the replicas join the group as static members and Kafka's own assignor
decides; the operator publishes its prediction (the same engine's answer for the same members) in
one epoch and compares it with DescribeGroups on every reconcile. The answer becomes the
`PlanApplied` condition and `status.brokerAssignment`: a difference means Kafka and the engine
disagree (another client in the group, members still joining, or an assignor difference).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from groupops.lag import LagError
from groupops.lag.base import GroupAssignment
from groupops.lag.kafka import KafkaLagSettings, KafkaLagSource
from groupops.model import TopicPartition

__all__ = ["BrokerAgreement", "compare_with_broker", "read_broker_agreement"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerAgreement:
    """`matches` None: not judged (the group is rebalancing, or Kafka did not answer)."""

    matches: bool | None
    group_state: str
    differing: tuple[str, ...] = ()
    message: str = ""

    def to_status(self) -> dict[str, object]:
        status: dict[str, object] = {"groupState": self.group_state, "differing": list(self.differing)}
        if self.matches is not None:
            status["matches"] = self.matches
        return status


def compare_with_broker(
    predicted: Mapping[str, Sequence[TopicPartition]], actual: GroupAssignment, epoch: int
) -> BrokerAgreement:
    """Identity by identity: the predicted set against the member with that group.instance.id.
    Members the prediction does not know (another client in the group) differ too."""
    if not actual.stable:
        return BrokerAgreement(
            matches=None,
            group_state=actual.state,
            message=f"group {actual.group_id!r} is {actual.state}: compared once it is Stable",
        )
    identities = sorted(set(predicted) | set(actual.members))
    differing = tuple(
        identity
        for identity in identities
        if sorted(predicted.get(identity, ())) != sorted(actual.members.get(identity, ()))
    )
    if not differing:
        return BrokerAgreement(
            matches=True,
            group_state=actual.state,
            message=f"Kafka's assignment (DescribeGroups) equals the prediction of epoch {epoch}",
        )
    return BrokerAgreement(
        matches=False,
        group_state=actual.state,
        differing=differing,
        message=(
            f"Kafka's assignment differs from the prediction of epoch {epoch} for {', '.join(differing)}"
        ),
    )


def read_broker_agreement(
    *,
    bootstrap_servers: str,
    client_config: Mapping[str, str],
    group_id: str,
    predicted: Mapping[str, Sequence[TopicPartition]],
    epoch: int,
    timeout_s: float,
) -> BrokerAgreement:
    """DescribeGroups on the policy's cluster, compared with `predicted`; never raises for Kafka
    trouble (the answer is then "not judged", with the reason)."""
    try:
        source = KafkaLagSource(
            KafkaLagSettings(
                bootstrap_servers=bootstrap_servers, timeout_s=timeout_s, client_config=dict(client_config)
            )
        )
        try:
            actual = source.assignment(group_id)
        finally:
            source.close()
    except LagError as e:
        return BrokerAgreement(matches=None, group_state="Unknown", message=f"cannot describe the group: {e}")
    return compare_with_broker(predicted, actual, epoch)
