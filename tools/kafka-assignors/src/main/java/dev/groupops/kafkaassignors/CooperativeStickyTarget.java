package dev.groupops.kafkaassignors;

import org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor;

/**
 * The target that Kafka's CooperativeStickyAssignor computes before it takes out the partitions
 * changing owner: the same AbstractStickyAssignor algorithm, reading owned partitions and
 * generation from the subscription fields as CooperativeStickyAssignor.memberData does for
 * ConsumerProtocolSubscription v2+ (the harness always fills them, and never sends user data).
 * The differential tests compare its balance with ours when Kafka's answer is not deterministic.
 */
final class CooperativeStickyTarget extends AbstractStickyAssignor {
    @Override
    public String name() {
        return "cooperative-sticky-target";
    }

    @Override
    protected MemberData memberData(Subscription subscription) {
        return new MemberData(subscription.ownedPartitions(), subscription.generationId(), subscription.rackId());
    }
}
