package dev.groupops.kafkaassignors;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupAssignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.common.TopicPartition;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;

/**
 * Runs Apache Kafka's own assignors on groups in the `groupops assign` JSON input format.
 *
 * <pre>
 * java -jar kafka-assignors.jar [--variants N] [--seed S]
 *     stdin: one group per line; stdout: one line per group, in order:
 *     {"assignment": {member_id: [[topic, partition], ...]}, "deterministic": true|false}
 *     For cooperative-sticky also "target": the sticky assignment before the partitions changing
 *     owner are taken out (CooperativeStickyTarget).
 *     Or {"error": "..."} when Kafka's assignor throws. With --variants N (default 1) the group is
 *     also handed over N-1 more times renamed and shuffled (KafkaGroup.Presentation);
 *     "deterministic" says whether all N answers agree. The first answer is the one printed.
 *
 * java -jar kafka-assignors.jar --bench [--repeat R] [--emit-assignment]
 *     times ConsumerPartitionAssignor.assign(Cluster, GroupSubscription) only (input built
 *     beforehand, a fresh assignor each call): the first call in this JVM ("cold_ms") and the
 *     median of R more ("warm_median_ms", default R = 5), wall clock, with the CPU time of the
 *     whole JVM process in the same runs ("cold_cpu_ms", "warm_median_cpu_ms": GC and JIT threads
 *     included, as Python's process_time; less inflated by a busy machine). One line per group:
 *     {"strategy": ..., "cold_ms": ..., "cold_cpu_ms": ..., "warm_median_ms": ...,
 *      "warm_median_cpu_ms": ..., "warm_runs": R[, "assignment": ...]}
 * </pre>
 * Environment KAFKA_HARNESS_TRACE=1 prints the stack trace of Kafka's exceptions on stderr.
 * Exit code 2 on bad arguments or input that is not JSON; 0 otherwise.
 */
public final class Main {
    private static final ObjectMapper MAPPER = new ObjectMapper();

    private Main() {
    }

    public static void main(String[] args) throws IOException {
        int variants = 1;
        long seed = 881;
        boolean bench = false;
        boolean emitAssignment = false;
        int repeat = 5;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--variants": variants = Integer.parseInt(args[++i]); break;
                case "--seed": seed = Long.parseLong(args[++i]); break;
                case "--bench": bench = true; break;
                case "--repeat": repeat = Integer.parseInt(args[++i]); break;
                case "--emit-assignment": emitAssignment = true; break;
                default:
                    System.err.println("Error: unknown argument " + args[i] + " (usage: see Main.java)");
                    System.exit(2);
            }
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8), 1 << 20);
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 20);
        JsonFactory factory = new JsonFactory();
        String line;
        long index = 0;
        while ((line = in.readLine()) != null) {
            if (line.isBlank())
                continue;
            JsonNode doc;
            try {
                doc = MAPPER.readTree(line);
            } catch (JsonProcessingException e) {
                System.err.println("Error: line " + (index + 1) + " is not JSON: " + e.getOriginalMessage());
                System.exit(2);
                return;
            }
            KafkaGroup group = new KafkaGroup(doc);
            // One generator per line: a shared one would put its root separator before the next.
            JsonGenerator json = factory.createGenerator(out);
            json.configure(JsonGenerator.Feature.AUTO_CLOSE_TARGET, false);
            if (bench)
                bench(group, repeat, emitAssignment, json);
            else
                answer(group, variants, new Random(seed + index), json);
            json.flush();
            out.write('\n');
            out.flush();
            index++;
        }
    }

    private static void answer(KafkaGroup group, int variants, Random random, JsonGenerator json) throws IOException {
        Map<String, List<TopicPartition>> first = null;
        Map<String, List<TopicPartition>> target = null;
        boolean deterministic = true;
        try {
            for (int v = 0; v < variants; v++) {
                KafkaGroup.Presentation presentation = v == 0 ? KafkaGroup.Presentation.CANONICAL
                        : new KafkaGroup.Presentation("v" + v + "~", new Random(random.nextLong()));
                KafkaGroup.Prepared prepared = group.prepare(presentation);
                GroupAssignment result = KafkaGroup.assignor(group.strategy).assign(prepared.cluster, prepared.subscription());
                Map<String, List<TopicPartition>> answer = prepared.unname(result);
                if (first == null)
                    first = answer;
                else if (!first.equals(answer))
                    deterministic = false;
            }
            if (group.strategy.equals("cooperative-sticky")) {
                KafkaGroup.Prepared prepared = group.prepare(KafkaGroup.Presentation.CANONICAL);
                target = prepared.unname(new CooperativeStickyTarget().assign(prepared.cluster, prepared.subscription()));
            }
        } catch (RuntimeException e) {
            if (System.getenv("KAFKA_HARNESS_TRACE") != null)
                e.printStackTrace();
            json.writeStartObject();
            json.writeStringField("error", e.getClass().getSimpleName() + ": " + e.getMessage());
            json.writeEndObject();
            return;
        }
        json.writeStartObject();
        writeAssignment(json, "assignment", first);
        if (target != null)
            writeAssignment(json, "target", target);
        if (variants > 1)
            json.writeBooleanField("deterministic", deterministic);
        json.writeEndObject();
    }

    private static void bench(KafkaGroup group, int repeat, boolean emitAssignment, JsonGenerator json) throws IOException {
        // Process CPU time, all JVM threads (GC and JIT included), like Python's time.process_time.
        com.sun.management.OperatingSystemMXBean os =
                (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        KafkaGroup.Prepared prepared = group.prepare(KafkaGroup.Presentation.CANONICAL);
        GroupSubscription subscription = prepared.subscription();
        long cpu = os.getProcessCpuTime();
        long start = System.nanoTime();
        GroupAssignment result = KafkaGroup.assignor(group.strategy).assign(prepared.cluster, subscription);
        double coldMs = (System.nanoTime() - start) / 1e6;
        double coldCpuMs = (os.getProcessCpuTime() - cpu) / 1e6;
        List<double[]> warm = new ArrayList<>();
        for (int r = 0; r < repeat; r++) {
            ConsumerPartitionAssignor assignor = KafkaGroup.assignor(group.strategy);
            subscription = prepared.subscription();
            cpu = os.getProcessCpuTime();
            start = System.nanoTime();
            result = assignor.assign(prepared.cluster, subscription);
            warm.add(new double[] {(System.nanoTime() - start) / 1e6, (os.getProcessCpuTime() - cpu) / 1e6});
        }
        warm.sort((a, b) -> Double.compare(a[0], b[0]));
        json.writeStartObject();
        json.writeStringField("strategy", group.strategy);
        json.writeNumberField("cold_ms", coldMs);
        json.writeNumberField("cold_cpu_ms", coldCpuMs);
        if (repeat > 0) {
            json.writeNumberField("warm_median_ms", warm.get(repeat / 2)[0]);
            json.writeNumberField("warm_median_cpu_ms", warm.get(repeat / 2)[1]);
        }
        json.writeNumberField("warm_runs", repeat);
        if (emitAssignment)
            writeAssignment(json, "assignment", prepared.unname(result));
        json.writeEndObject();
    }

    private static void writeAssignment(JsonGenerator json, String field, Map<String, List<TopicPartition>> assignment)
            throws IOException {
        json.writeObjectFieldStart(field);
        for (Map.Entry<String, List<TopicPartition>> e : assignment.entrySet()) {
            json.writeArrayFieldStart(e.getKey());
            for (TopicPartition tp : e.getValue()) {
                json.writeStartArray();
                json.writeString(tp.topic());
                json.writeNumber(tp.partition());
                json.writeEndArray();
            }
            json.writeEndArray();
        }
        json.writeEndObject();
    }
}
