package org.apache.kafka.clients.consumer;

import org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor.MemberData;
import org.apache.kafka.common.TopicPartition;

import java.nio.ByteBuffer;
import java.util.List;
import java.util.Optional;

/**
 * The eager StickyAssignor reads a member's previous assignment and generation from the
 * subscription's user data, not from ownedPartitions/generationId. This bridge (in Kafka's package,
 * for the package-private serializer) encodes it with Kafka's own code, exactly as a real
 * StickyAssignor consumer does in subscriptionUserData().
 */
public final class StickyUserData {
    private StickyUserData() {
    }

    /** User data for owned partitions and a generation (empty: old clients that sent none). */
    public static ByteBuffer encode(List<TopicPartition> owned, Optional<Integer> generation) {
        return StickyAssignor.serializeTopicPartitionAssignment(new MemberData(owned, generation));
    }
}
