/*
 * The Java share consumer (kafka-clients, the version pinned in kafka/pom.xml) of notebook 09's
 * RENEW section (KIP-1222): a member whose work on a record outlasts the acquisition lock, with or
 * without renewing the lock. kafkalab.experiments.share_groups.run_renew runs two of them in one
 * share group on a topic of one record.
 *
 * Arguments: bootstrap servers, topic, group.id, client.id, the ledger (one JSON line per delivery
 * and per acknowledgement, with the broker's answer), "renew" or "plain", the work per record (ms),
 * the stop file (the program polls until it exists).
 *
 * Built by `make jars` (mvn -f kafka/pom.xml package) into .kafkalab/jars/clients/.
 */
package kafkalab.clients;

import java.io.FileWriter;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareRenewConsumer {
    static PrintWriter log;

    static synchronized void record(String json) {
        log.println("{\"ms\":" + System.currentTimeMillis() + "," + json + "}");
        log.flush();
    }

    static String quote(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    /** commitSync's answer for the record's partition: null (taken) or the exception's class name. */
    static String answer(Map<TopicIdPartition, Optional<KafkaException>> result) {
        for (Optional<KafkaException> e : result.values()) {
            if (e.isPresent()) {
                return e.get().getClass().getSimpleName();
            }
        }
        return null;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2], clientId = args[3];
        boolean renew = args[5].equals("renew");
        long workMs = Long.parseLong(args[6]);
        Path stop = Path.of(args[7]);
        log = new PrintWriter(new FileWriter(args[4], true));

        // --- shown in notebook 09 (programs.java_source) from here
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put("share.acknowledgement.mode", "explicit");  // RENEW needs explicit acknowledgement
        props.put("share.acquire.mode", "record_limit");      // at most max.poll.records acquired per poll
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 1);

        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            ConsumerRecord<String, String> current = null;  // the record being worked on
            long done = 0;                                   // ms of work done on it
            while (!Files.exists(stop)) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) {
                    boolean again = current != null && r.offset() == current.offset();
                    if (!again) {
                        done = 0;
                        record("\"event\":\"delivered\",\"client\":" + quote(clientId) + ",\"offset\":" + r.offset()
                               + ",\"delivery_count\":" + r.deliveryCount().orElse((short) -1));
                    }
                    current = r;  // a renewed record is returned again by poll(): acknowledge that one
                }
                if (current == null) {
                    continue;
                }
                int lockMs = consumer.acquisitionLockTimeoutMs().orElse(30000);
                // the work, in steps of half the lock when renewing, in one go when not
                long step = renew ? Math.min(lockMs / 2, workMs - done) : workMs - done;
                Thread.sleep(step);                          // the simulated work
                done += step;
                AcknowledgeType type = done < workMs ? AcknowledgeType.RENEW : AcknowledgeType.ACCEPT;
                consumer.acknowledge(current, type);
                String error = answer(consumer.commitSync());  // sends it; the broker's answer per partition
                record("\"event\":\"acknowledged\",\"client\":" + quote(clientId) + ",\"offset\":" + current.offset()
                       + ",\"ack\":" + quote(type.name()) + ",\"error\":" + quote(error) + ",\"lock_ms\":" + lockMs);
                if (type == AcknowledgeType.ACCEPT || error != null) {
                    current = null;                          // done with it, or it is no longer ours
                }
            }
        }
        // --- to here
        log.close();
    }
}
