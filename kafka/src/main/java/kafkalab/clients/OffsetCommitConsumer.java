/*
 * Apache Kafka's own Java consumer (kafka-clients, the version pinned in kafka/pom.xml), driven
 * like kafkalab's librdkafka consumer process in notebook 03 (kafkalab.experiments.offset_commit):
 * the same ledger lines (kafkalab.ledger's JSON-lines format), the same crash points.
 *
 * Built by `make jars` (mvn -f kafka/pom.xml package) into .kafkalab/jars/clients/; Python starts it
 * with `java -cp <that jar>:<broker jars> kafkalab.clients.OffsetCommitConsumer ...`
 * (offset_commit.spawn_java_consumer, offset_commit.java_consumer_defaults).
 *
 * Runtime.halt ends the JVM at once (no shutdown hooks, no close(), so no commit and no
 * LeaveGroup): to the broker it is the same crash as SIGKILL.
 *
 * Commit modes (args MODE): "auto" (enable.auto.commit=true: ConsumerCoordinator commits, inside
 * the next poll(), the positions the previous poll reached), "sync-per-message"
 * (commitSync(Map.of(tp, offset + 1)) after each record), "commit-sync-no-args" (commitSync()
 * after each record: the positions of the whole last poll()), "commit-async-no-args" (commitAsync()
 * after each record: the same positions, without waiting). Source: KafkaConsumer javadoc,
 * "Offsets and Consumer Position"; ConsumerConfig.
 */
package kafkalab.clients;

import java.io.FileOutputStream;
import java.io.FileReader;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/** args: PROPERTIES_FILE RUN_ID TOPIC LEDGER MODE PROCESS_MS CRASH_AFTER(0 = drain and exit) CRASH_POINT, or --defaults */
public class OffsetCommitConsumer {
    static FileOutputStream out;
    static long seq = 0;
    static String runId, topic, client;

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') b.append('\\').append(ch);
            else if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
            else b.append(ch);
        }
        return b.append('"').toString();
    }

    /** The version kafka-clients was built as: its own kafka/kafka-version.properties, the file
     *  AppInfoParser reads (AppInfoParser moved to ...common.utils.internals in 4.4.0, so it is no
     *  longer public API; the resource is in the jar in 4.3.1 and 4.4.0 alike). */
    static String clientsVersion() throws Exception {
        Properties p = new Properties();
        try (InputStream in = KafkaConsumer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            p.load(in);
        }
        return p.getProperty("version");
    }

    static void note(String kind, int partition, long offset, String key, String value) throws Exception {
        String line = "{\"run_id\":" + q(runId) + ",\"kind\":" + q(kind) + ",\"ts_ms\":" + System.currentTimeMillis()
            + ",\"seq\":" + (seq++) + ",\"topic\":" + q(topic) + ",\"partition\":" + partition
            + ",\"offset\":" + offset + ",\"key\":" + q(key) + ",\"value\":" + q(value)
            + ",\"client_id\":" + q(client) + "}\n";
        out.write(line.getBytes(StandardCharsets.UTF_8));
        out.flush();
    }

    public static void main(String[] a) throws Exception {
        if (a[0].equals("--defaults")) {  // this jar's ConsumerConfig defaults, nothing set
            Properties none = new Properties();
            none.put("bootstrap.servers", "127.0.0.1:9092");
            none.put("group.id", "defaults");  // without a group.id, ConsumerConfig turns auto-commit off
            none.put("key.deserializer", StringDeserializer.class.getName());
            none.put("value.deserializer", StringDeserializer.class.getName());
            ConsumerConfig c = new ConsumerConfig(none);
            System.out.println("enable.auto.commit=" + c.getBoolean(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG));
            System.out.println("auto.commit.interval.ms=" + c.getInt(ConsumerConfig.AUTO_COMMIT_INTERVAL_MS_CONFIG));
            System.out.println("max.poll.records=" + c.getInt(ConsumerConfig.MAX_POLL_RECORDS_CONFIG));
            System.out.println("group.protocol=" + c.getString(ConsumerConfig.GROUP_PROTOCOL_CONFIG));
            System.out.println("kafka-clients=" + clientsVersion());
            none.remove("group.id");
            System.out.println("enable.auto.commit.without.group.id="
                + new ConsumerConfig(none).getBoolean(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG));
            return;
        }
        Properties props = new Properties();
        try (FileReader r = new FileReader(a[0])) { props.load(r); }
        runId = a[1]; topic = a[2]; client = props.getProperty("client.id");
        out = new FileOutputStream(a[3], true);
        String mode = a[4];
        long processMs = Long.parseLong(a[5]);
        int crashAfter = Integer.parseInt(a[6]);
        boolean afterProcess = a[7].equals("after-process");
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
        consumer.subscribe(List.of(topic));
        int processed = 0;
        while (true) {
            ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
            for (ConsumerRecord<String, String> r : records) note("consumed", r.partition(), r.offset(), r.key(), r.value());
            for (ConsumerRecord<String, String> r : records) {
                if (processMs > 0) Thread.sleep(processMs);  // the work itself (simulated)
                note("processed", r.partition(), r.offset(), r.key(), r.value());
                processed++;
                boolean crashNow = crashAfter > 0 && processed >= crashAfter;
                if (crashNow && afterProcess) Runtime.getRuntime().halt(137);
                if (mode.equals("sync-per-message")) {
                    consumer.commitSync(Map.of(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1)));
                } else if (mode.equals("commit-sync-no-args")) {
                    consumer.commitSync();  // commits the positions of the last poll(), for every partition
                } else if (mode.equals("commit-async-no-args")) {
                    consumer.commitAsync();  // the same positions, sent without waiting for the answer
                }
                if (crashNow) Runtime.getRuntime().halt(137);
            }
            if (crashAfter <= 0 && records.isEmpty() && !consumer.assignment().isEmpty()) {
                Map<TopicPartition, Long> end = consumer.endOffsets(consumer.assignment());
                boolean caughtUp = true;
                for (TopicPartition tp : consumer.assignment()) caughtUp &= consumer.position(tp) >= end.get(tp);
                if (caughtUp) {
                    // with enable.auto.commit, close() commits the positions. A static member (group.instance.id)
                    // stays in the group after a plain close() until its session times out (KIP-345); this one
                    // leaves, so the run's group is empty, and can be deleted, at once (KIP-1092, Kafka 4.1).
                    consumer.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP));
                    out.close();
                    System.exit(0);
                }
            }
        }
    }
}
