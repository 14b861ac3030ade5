package dev.tideline.connect;

import java.nio.ByteBuffer;
import java.util.Collection;
import java.util.Map;

import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.ConnectRecord;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.transforms.Transformation;

/**
 * A change event too big for its topic becomes a small marker event with the same key, op and
 * source block, and {@code tideline_too_large: {bytes, limit}} instead of the row images.
 *
 * <p>Why: Kafka refuses a record above the producer's {@code max.request.size} (or the topic's
 * {@code max.message.bytes}), and the connector task then fails: no table of the pipeline
 * receives a change, and nothing says which row it was. The marker travels in the table's own
 * order; Tideline's stream halts that table alone at it, naming key, offset and size, and the
 * other tables go on. The size is estimated as the JSON the converter writes (UTF-8 bytes of
 * strings with their escapes, base64 for bytes, field names), plus {@code slack.bytes} for the
 * envelope and an embedded schema; records without a struct value pass unchanged.
 */
public class GuardSize<R extends ConnectRecord<R>> implements Transformation<R> {

    public static final String MAX = "max.bytes";
    public static final String SLACK = "slack.bytes";
    public static final ConfigDef CONFIG_DEF = new ConfigDef()
        .define(MAX, ConfigDef.Type.LONG, 1048576L, ConfigDef.Importance.HIGH, "largest event the topic takes")
        .define(SLACK, ConfigDef.Type.LONG, 65536L, ConfigDef.Importance.LOW,
                "bytes kept free for the envelope and an embedded schema");

    private static final Schema TOO_LARGE = SchemaBuilder.struct().name("dev.tideline.TooLarge").optional()
        .field("bytes", Schema.INT64_SCHEMA).field("limit", Schema.INT64_SCHEMA).build();

    private long max;
    private long slack;

    @Override
    public void configure(Map<String, ?> props) {
        AbstractConfig config = new AbstractConfig(CONFIG_DEF, props);
        max = config.getLong(MAX);
        slack = config.getLong(SLACK);
    }

    @Override
    public R apply(R record) {
        if (!(record.value() instanceof Struct value)) {
            return record;
        }
        long size = estimate(value);
        if (size + slack <= max) {
            return record;
        }
        SchemaBuilder builder = SchemaBuilder.struct().name("dev.tideline.TooLargeEnvelope");
        for (String name : new String[] {"op", "source", "ts_ms"}) {
            Field f = value.schema().field(name);
            if (f != null) {
                builder.field(name, f.schema());
            }
        }
        Schema schema = builder.field("tideline_too_large", TOO_LARGE).build();
        Struct marker = new Struct(schema);
        for (Field f : schema.fields()) {
            if (!f.name().equals("tideline_too_large")) {
                marker.put(f, value.get(f.name()));
            }
        }
        marker.put("tideline_too_large", new Struct(TOO_LARGE).put("bytes", size).put("limit", max));
        return record.newRecord(record.topic(), record.kafkaPartition(), record.keySchema(), record.key(),
                                schema, marker, record.timestamp(), record.headers());
    }

    /** About the bytes of the value as JSON (never less for strings and bytes, the big parts). */
    static long estimate(Object v) {
        if (v == null) {
            return 4;
        }
        if (v instanceof String s) {
            return 2 + jsonBytes(s);
        }
        if (v instanceof byte[] b) {
            return 2 + 4L * ((b.length + 2) / 3);
        }
        if (v instanceof ByteBuffer b) {
            return 2 + 4L * ((b.remaining() + 2) / 3);
        }
        if (v instanceof Struct s) {
            long n = 2;
            for (Field f : s.schema().fields()) {
                n += jsonBytes(f.name()) + 4 + estimate(s.get(f));
            }
            return n;
        }
        if (v instanceof Collection<?> c) {
            long n = 2;
            for (Object e : c) {
                n += 1 + estimate(e);
            }
            return n;
        }
        if (v instanceof Map<?, ?> m) {
            long n = 2;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                n += 2 + estimate(e.getKey()) + estimate(e.getValue());
            }
            return n;
        }
        return 24;   // numbers, booleans, decimals as text
    }

    /** UTF-8 bytes of a JSON string's content, escapes included. */
    static long jsonBytes(String s) {
        long n = 0;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                n += 2;
            } else if (c < 0x20) {
                n += 6;
            } else if (c < 0x80) {
                n += 1;
            } else if (c < 0x800) {
                n += 2;
            } else if (Character.isHighSurrogate(c)) {
                n += 4;
                i++;
            } else {
                n += 3;
            }
        }
        return n;
    }

    @Override
    public ConfigDef config() {
        return CONFIG_DEF;
    }

    @Override
    public void close() {
    }
}
