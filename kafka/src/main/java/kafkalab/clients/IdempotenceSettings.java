/*
 * What Apache Kafka's Java producer (kafka-clients, the version pinned in kafka/pom.xml) makes of
 * enable.idempotence and the settings it needs (acks, retries, max.in.flight.requests.per.connection):
 * notebook 04, section 6 (kafkalab.experiments.idempotence.run_java_settings).
 *
 * Each argument is one set of producer settings, "key=value,key=value" ("" for none). For each the
 * program prints one line, ARGUMENT<TAB>RESULT: the effective settings, or the ConfigException the
 * configuration threw. Nothing is sent: `new KafkaProducer<>(props)` builds a ProducerConfig from the
 * same properties first and throws what it throws, so the ProducerConfig is built here alone.
 *
 * Built by `make jars` (mvn -f kafka/pom.xml package) into .kafkalab/jars/clients/. Source of the
 * rules: ProducerConfig.postProcessAndValidateIdempotenceConfigs (KIP-679; KAFKA-13598).
 */
package kafkalab.clients;

import java.util.Properties;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.serialization.StringSerializer;

public class IdempotenceSettings {
    public static void main(String[] args) {
        for (String arg : args) {
            Properties props = new Properties();
            props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:9092");  // never contacted
            props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            for (String setting : arg.split(",")) {
                if (!setting.isEmpty()) {
                    String[] kv = setting.split("=", 2);
                    props.put(kv[0], kv[1]);
                }
            }
            try {
                ProducerConfig config = new ProducerConfig(props);  // what new KafkaProducer<>(props) does first
                System.out.println(arg + "\t"
                    + "enable.idempotence=" + config.getBoolean(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG)
                    + ",acks=" + config.getString(ProducerConfig.ACKS_CONFIG)
                    + ",retries=" + config.getInt(ProducerConfig.RETRIES_CONFIG)
                    + ",max.in.flight.requests.per.connection="
                    + config.getInt(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION));
            } catch (ConfigException e) {
                System.out.println(arg + "\tConfigException: " + e.getMessage());
            }
        }
    }
}
