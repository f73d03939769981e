/*
 * The Java transactional producer (kafka-clients, the version pinned in kafka/pom.xml) under the
 * schedule of notebook 11, the late transaction request (KAFKA-17754):
 * kafkalab.experiments.late_txn.run_java runs it through the fault proxy, the same steps as the
 * Python program there.
 *
 * Arguments: bootstrap servers, topic, transactional.id, client.id, the ledger (one JSON line per
 * step), the ready file, the go file: after N+1's first records the program creates the ready
 * file and waits for the go file (the harness has delivered the held EndTxn), as a Python
 * program of role "gated" does (kafkalab.instruments.fault_gate).
 *
 * Built by `make jars` (mvn -f kafka/pom.xml package) into .kafkalab/jars/clients/.
 */
package kafkalab.clients;

import java.io.FileWriter;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.serialization.StringSerializer;

public class LateTxnProducer {
    static PrintWriter log;

    static synchronized void record(String json) {
        log.println(json);
        log.flush();
    }

    static String quote(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static void waitFor(Path file, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!Files.exists(file)) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("no " + file + " from the harness within " + timeoutMs + " ms");
            }
            Thread.sleep(10);
        }
    }

    static void write(KafkaProducer<String, String> producer, String topic, String label, int n) {
        for (int i = 0; i < n; i++) {
            String value = label + "-" + i;
            producer.send(new ProducerRecord<>(topic, value), (md, err) -> record(
                "{\"step\":\"delivery\",\"value\":" + quote(value) + ",\"offset\":" + (md == null ? -1 : md.offset())
                + ",\"error\":" + (err == null ? "null" : quote(err.getClass().getSimpleName())) + "}"));
        }
        producer.flush();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], txnId = args[2], clientId = args[3];
        Path ready = Path.of(args[5]), go = Path.of(args[6]);
        log = new PrintWriter(new FileWriter(args[4], true));

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, clientId);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        // A request unanswered for 2 s times out: NetworkClient closes the connection and the
        // TransactionManager sends the EndTxn again (ProducerConfig request.timeout.ms).
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 2000);
        // delivery.timeout.ms must be >= linger.ms + request.timeout.ms (ProducerConfig).
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30000);
        props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 60000);

        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();

            // transaction N: its EndTxn(commit) is the one the proxy holds
            producer.beginTransaction();
            write(producer, topic, "N", 3);
            producer.commitTransaction();           // times out once, re-sent on a new connection
            record("{\"step\":\"committed\",\"txn\":\"N\"}");

            // transaction N+1
            producer.beginTransaction();
            write(producer, topic, "N+1-before", 3);
            Files.createFile(ready);
            waitFor(go, 180_000);  // the late EndTxn of N reached the coordinator
            try {
                write(producer, topic, "N+1-after", 3);
                producer.abortTransaction();         // the program decides: N+1 is aborted
                record("{\"step\":\"aborted\",\"txn\":\"N+1\"}");
            } catch (KafkaException e) {
                record("{\"step\":\"error\",\"txn\":\"N+1\",\"error\":" + quote(e.getClass().getSimpleName())
                       + ",\"message\":" + quote(String.valueOf(e.getMessage())) + "}");
            }
        }
        log.close();
    }
}
