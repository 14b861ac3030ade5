package dev.tideline.connect;

import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.common.cache.Cache;
import org.apache.kafka.common.cache.LRUCache;
import org.apache.kafka.common.cache.SynchronizedCache;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.ConnectRecord;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.transforms.Transformation;

/**
 * Keeps only the listed fields of a Debezium change event's {@code source} block (default:
 * {@code ts_ms}, the source commit time the stream measures its lag from); every other field of
 * the event stays as it is, names and schema versions included.
 *
 * <p>Why: the {@code source} block (connector version, name, database, sequence, LSN, transaction
 * id, microsecond and nanosecond times ...) is about two thirds of a typical event's bytes, and
 * Tideline's stream reads none of it but {@code ts_ms}. Kafka's own ReplaceField drops top-level
 * fields only. Records without a struct value or a {@code source} field (tombstones, heartbeats)
 * pass unchanged.
 */
public class SlimSource<R extends ConnectRecord<R>> implements Transformation<R> {

    public static final String KEEP = "keep";
    public static final ConfigDef CONFIG_DEF = new ConfigDef()
        .define(KEEP, ConfigDef.Type.LIST, List.of("ts_ms"), ConfigDef.Importance.MEDIUM,
                "fields of the source block to keep");

    private Set<String> keep;
    private Cache<Schema, Schema> schemas;

    @Override
    public void configure(Map<String, ?> props) {
        keep = new HashSet<>(new AbstractConfig(CONFIG_DEF, props).getList(KEEP));
        schemas = new SynchronizedCache<>(new LRUCache<>(64));
    }

    @Override
    public R apply(R record) {
        if (!(record.value() instanceof Struct value)) {
            return record;
        }
        Field source = value.schema().field("source");
        if (source == null || source.schema().type() != Schema.Type.STRUCT) {
            return record;
        }
        Schema slim = schemas.get(value.schema());
        if (slim == null) {
            slim = slimSchema(value.schema(), source);
            schemas.put(value.schema(), slim);
        }
        Struct out = new Struct(slim);
        for (Field f : slim.fields()) {
            Object v = value.get(f.name());
            if (f.name().equals("source") && v != null) {
                Struct full = (Struct) v;
                Struct kept = new Struct(f.schema());
                for (Field k : f.schema().fields()) {
                    kept.put(k, full.get(k.name()));
                }
                v = kept;
            }
            out.put(f, v);
        }
        return record.newRecord(record.topic(), record.kafkaPartition(), record.keySchema(), record.key(),
                                slim, out, record.timestamp(), record.headers());
    }

    private Schema slimSchema(Schema envelope, Field source) {
        SchemaBuilder src = copyHead(source.schema(), SchemaBuilder.struct());
        for (Field f : source.schema().fields()) {
            if (keep.contains(f.name())) {
                src.field(f.name(), f.schema());
            }
        }
        SchemaBuilder env = copyHead(envelope, SchemaBuilder.struct());
        for (Field f : envelope.fields()) {
            env.field(f.name(), f.name().equals("source") ? src.build() : f.schema());
        }
        return env.build();
    }

    private static SchemaBuilder copyHead(Schema from, SchemaBuilder to) {
        to.name(from.name()).version(from.version()).doc(from.doc());
        if (from.isOptional()) {
            to.optional();
        }
        if (from.parameters() != null) {
            to.parameters(from.parameters());
        }
        return to;
    }

    @Override
    public ConfigDef config() {
        return CONFIG_DEF;
    }

    @Override
    public void close() {
    }
}
