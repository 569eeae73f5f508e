package dev.groupops.kafkaassignors;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.consumer.StickyUserData;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * One group in the `groupops assign` JSON input format (operator/groupops/contract.py), turned into
 * what Kafka's assignors take: a {@link Cluster} whose partitions have one replica per listed rack
 * (a node per rack; a rack-less node when none is listed) and one {@link Subscription} per member
 * (topics, group.instance.id, rack; owned partitions and generation as the strategy's real clients
 * send them: ownedPartitions + generationId, and for the eager StickyAssignor the user data).
 *
 * <p>A {@link Presentation} can rename every id with a common prefix (which keeps Java's string
 * order, so every rule of the assignors sees the same input, but changes every hash) and shuffle
 * the order in which members, topics and partitions are handed over. Kafka's answer is
 * deterministic for a group when it is the same under every presentation.
 */
final class KafkaGroup {
    /** How a group is handed to Kafka: a name prefix and a shuffle (null: the input's order). */
    record Presentation(String prefix, Random shuffle) {
        static final Presentation CANONICAL = new Presentation("", null);

        String name(String name) {
            return name.isEmpty() ? name : prefix + name;
        }

        String unname(String name) {
            return name.isEmpty() ? name : name.substring(prefix.length());
        }

        <T> List<T> order(List<T> items) {
            if (shuffle == null)
                return items;
            List<T> copy = new ArrayList<>(items);
            Collections.shuffle(copy, shuffle);
            return copy;
        }
    }

    private record Member(String memberId, String groupInstanceId, List<String> topics,
                          List<TopicPartition> owned, Integer generation, String rack) {
    }

    /** What one assign() call needs; {@link #subscription()} builds fresh objects for every call,
     *  since the sticky assignors read (and rewind) the user data buffers. */
    static final class Prepared {
        final Cluster cluster;
        private final Map<String, Subscription> template;
        private final Presentation presentation;

        private Prepared(Cluster cluster, Map<String, Subscription> template, Presentation presentation) {
            this.cluster = cluster;
            this.template = template;
            this.presentation = presentation;
        }

        GroupSubscription subscription() {
            Map<String, Subscription> copy = new LinkedHashMap<>();
            template.forEach((memberId, s) -> {
                ByteBuffer userData = s.userData() == null ? null : s.userData().duplicate();
                Subscription fresh = new Subscription(s.topics(), userData, s.ownedPartitions(),
                        s.generationId().orElse(-1), s.rackId());
                fresh.setGroupInstanceId(s.groupInstanceId());
                copy.put(memberId, fresh);
            });
            return new GroupSubscription(copy);
        }

        /** Kafka's assignment in input names: member id -> partitions sorted by (topic, partition). */
        TreeMap<String, List<TopicPartition>> unname(ConsumerPartitionAssignor.GroupAssignment result) {
            TreeMap<String, List<TopicPartition>> out = new TreeMap<>();
            for (String memberId : template.keySet())
                out.put(presentation.unname(memberId), new ArrayList<>());
            result.groupAssignment().forEach((memberId, assignment) -> {
                List<TopicPartition> partitions = out.computeIfAbsent(presentation.unname(memberId), k -> new ArrayList<>());
                for (TopicPartition tp : assignment.partitions())
                    partitions.add(new TopicPartition(presentation.unname(tp.topic()), tp.partition()));
            });
            out.values().forEach(list -> list.sort((a, b) -> a.topic().equals(b.topic())
                    ? Integer.compare(a.partition(), b.partition()) : a.topic().compareTo(b.topic())));
            return out;
        }
    }

    final String strategy;
    private final Map<String, Integer> topics = new LinkedHashMap<>();
    private final Map<String, List<List<String>>> partitionRacks = new HashMap<>();
    private final List<Member> members = new ArrayList<>();

    KafkaGroup(JsonNode doc) {
        strategy = text(doc, "strategy");
        for (Map.Entry<String, JsonNode> e : doc.path("topics").properties())
            topics.put(e.getKey(), e.getValue().asInt());
        for (Map.Entry<String, JsonNode> e : doc.path("partition_racks").properties()) {
            List<List<String>> perPartition = new ArrayList<>();
            for (JsonNode racks : e.getValue()) {
                List<String> list = new ArrayList<>();
                racks.forEach(r -> list.add(r.asText()));
                perPartition.add(list);
            }
            partitionRacks.put(e.getKey(), perPartition);
        }
        for (JsonNode m : doc.path("members")) {
            List<String> subscribed = new ArrayList<>();
            m.path("topics").forEach(t -> subscribed.add(t.asText()));
            List<TopicPartition> owned = new ArrayList<>();
            m.path("owned").forEach(tp -> owned.add(new TopicPartition(tp.get(0).asText(), tp.get(1).asInt())));
            members.add(new Member(text(m, "member_id"), optionalText(m, "group_instance_id"), subscribed, owned,
                    m.hasNonNull("generation") ? m.get("generation").asInt() : null, optionalText(m, "rack")));
        }
    }

    static ConsumerPartitionAssignor assignor(String strategy) {
        switch (strategy) {
            case "range": return new RangeAssignor();
            case "roundrobin": return new RoundRobinAssignor();
            case "sticky": return new StickyAssignor();
            case "cooperative-sticky": return new CooperativeStickyAssignor();
            default: throw new IllegalArgumentException("no Kafka assignor for strategy " + strategy);
        }
    }

    Prepared prepare(Presentation p) {
        return new Prepared(cluster(p), subscriptions(p), p);
    }

    private Cluster cluster(Presentation p) {
        Node rackless = new Node(0, "broker-0.invalid", 9092);
        Map<String, Node> nodeByRack = new HashMap<>();
        TreeSet<String> racks = new TreeSet<>();
        partitionRacks.values().forEach(perPartition -> perPartition.forEach(racks::addAll));
        for (String rack : racks)
            nodeByRack.put(rack, new Node(nodeByRack.size() + 1, "broker-" + (nodeByRack.size() + 1) + ".invalid", 9092, p.name(rack)));
        List<PartitionInfo> partitions = new ArrayList<>();
        for (Map.Entry<String, Integer> topic : topics.entrySet()) {
            List<List<String>> perPartition = partitionRacks.get(topic.getKey());
            for (int partition = 0; partition < topic.getValue(); partition++) {
                List<Node> replicas = new ArrayList<>();
                if (perPartition != null)
                    perPartition.get(partition).forEach(rack -> replicas.add(nodeByRack.get(rack)));
                if (replicas.isEmpty())
                    replicas.add(rackless);
                Node[] array = p.order(replicas).toArray(new Node[0]);
                partitions.add(new PartitionInfo(p.name(topic.getKey()), partition, array[0], array, array));
            }
        }
        List<Node> nodes = new ArrayList<>(nodeByRack.values());
        nodes.add(rackless);
        return new Cluster("groupops-harness", nodes, p.order(partitions), Collections.emptySet(), Collections.emptySet());
    }

    private Map<String, Subscription> subscriptions(Presentation p) {
        Map<String, Subscription> out = new LinkedHashMap<>();
        for (Member m : p.order(members)) {
            List<String> subscribed = new ArrayList<>();
            for (String topic : p.order(m.topics()))
                subscribed.add(p.name(topic));
            List<TopicPartition> owned = new ArrayList<>();
            for (TopicPartition tp : m.owned())
                owned.add(new TopicPartition(p.name(tp.topic()), tp.partition()));
            int generation = m.generation() == null ? -1 : m.generation();
            Optional<String> rack = Optional.ofNullable(m.rack()).map(p::name);
            Subscription subscription;
            if (strategy.equals("sticky")) {
                // Eager protocol: a real StickyAssignor consumer has revoked everything before it
                // joins and carries its previous assignment and generation in the user data.
                ByteBuffer userData = owned.isEmpty() && m.generation() == null ? null
                        : StickyUserData.encode(owned, Optional.of(generation));
                subscription = new Subscription(subscribed, userData, List.of(), generation, rack);
            } else {
                subscription = new Subscription(subscribed, null, owned, generation, rack);
            }
            subscription.setGroupInstanceId(Optional.ofNullable(m.groupInstanceId()).map(p::name));
            out.put(p.name(m.memberId()), subscription);
        }
        return out;
    }

    private static String text(JsonNode node, String field) {
        JsonNode value = node.get(field);
        if (value == null || !value.isTextual())
            throw new IllegalArgumentException("missing string field " + field);
        return value.asText();
    }

    private static String optionalText(JsonNode node, String field) {
        return node.hasNonNull(field) ? node.get(field).asText() : null;
    }
}
