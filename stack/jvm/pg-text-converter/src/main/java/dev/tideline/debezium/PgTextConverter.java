package dev.tideline.debezium;

import java.math.BigDecimal;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.OffsetDateTime;
import java.time.OffsetTime;
import java.time.ZoneOffset;
import java.util.Properties;

import org.apache.kafka.connect.data.SchemaBuilder;
import org.postgresql.jdbc.PgArray;
import org.postgresql.util.PGInterval;
import org.postgresql.util.PGobject;

import io.debezium.connector.postgresql.PostgresValueConverter;
import io.debezium.connector.postgresql.UnchangedToastedReplicationMessageColumn;
import io.debezium.data.SpecialValueDecimal;
import io.debezium.spi.converter.CustomConverter;
import io.debezium.spi.converter.RelationalColumn;

/**
 * Every captured column as the PostgreSQL text form of its value, so the stream carries exactly
 * what the full load carries ({@code col::text}) and the apply casts it back with the same input
 * function COPY uses.
 *
 * <p>Why: Debezium's own representations lose values a PostgreSQL table may hold (BC dates and
 * timestamps become ISO years PostgreSQL rejects, infinity becomes a sentinel instant, bit varying
 * loses its length, multi-dimensional and empty arrays change shape). pgoutput sends text; where
 * Debezium has already parsed it (dates, timestamps, numerics, intervals, money, bytea) this class
 * prints the parsed value back in PostgreSQL's own syntax, and where it kept the text (arrays,
 * ranges, bit strings, json, enums, unknown types) it passes the text through.
 *
 * <p>One value cannot be recovered: Debezium's decoder moves {@code timetz} values to UTC before any
 * converter sees them; Tideline refuses such columns at config/doctor time.
 */
public class PgTextConverter implements CustomConverter<SchemaBuilder, RelationalColumn> {

    /** Debezium's placeholder for an unchanged TOASTed value it did not receive. */
    public static final String UNAVAILABLE = "__debezium_unavailable_value";

    private String unavailable = UNAVAILABLE;

    @Override
    public void configure(Properties props) {
        unavailable = props.getProperty("unavailable.value.placeholder", UNAVAILABLE);
    }

    @Override
    public void converterFor(RelationalColumn column, ConverterRegistration<SchemaBuilder> registration) {
        registration.register(SchemaBuilder.string().optional(), this::text);
    }

    /** The PostgreSQL text form of a value as Debezium's pgoutput decoder resolved it. */
    Object text(Object value) {
        if (value == null) {
            return null;
        }
        if (UnchangedToastedReplicationMessageColumn.isUnchangedToastedValue(value)) {   // one marker per type family
            return unavailable;
        }
        if (value instanceof String s) {
            return s;
        }
        if (value instanceof Boolean b) {
            return b ? "t" : "f";
        }
        if (value instanceof SpecialValueDecimal d) {
            return d.getDecimalValue().map(BigDecimal::toPlainString).orElseGet(() -> special(d));
        }
        if (value instanceof BigDecimal d) {   // money
            return d.toPlainString();
        }
        if (value instanceof Number n) {        // int2/4/8, oid, float4/8 (NaN, Infinity, -0.0 print as PostgreSQL reads them)
            return n.toString();
        }
        if (value instanceof LocalDate d) {
            if (d.equals(PostgresValueConverter.POSITIVE_INFINITY_LOCAL_DATE)) {
                return "infinity";
            }
            if (d.equals(PostgresValueConverter.NEGATIVE_INFINITY_LOCAL_DATE)) {
                return "-infinity";
            }
            return date(d.getYear(), d.getMonthValue(), d.getDayOfMonth(), "");
        }
        if (value instanceof Instant i) {       // timestamp without time zone, read as if UTC
            if (i.equals(PostgresValueConverter.POSITIVE_INFINITY_INSTANT)) {
                return "infinity";
            }
            if (i.equals(PostgresValueConverter.NEGATIVE_INFINITY_INSTANT)) {
                return "-infinity";
            }
            return timestamp(LocalDateTime.ofInstant(i, ZoneOffset.UTC), "");
        }
        if (value instanceof OffsetDateTime t) {   // timestamp with time zone, moved to UTC
            if (t.equals(PostgresValueConverter.POSITIVE_INFINITY_OFFSET_DATE_TIME)) {
                return "infinity";
            }
            if (t.equals(PostgresValueConverter.NEGATIVE_INFINITY_OFFSET_DATE_TIME)) {
                return "-infinity";
            }
            return timestamp(t.withOffsetSameInstant(ZoneOffset.UTC).toLocalDateTime(), "+00");
        }
        if (value instanceof OffsetTime t) {       // timetz: already in UTC (see class comment)
            return time(t.withOffsetSameInstant(ZoneOffset.UTC).toLocalTime()) + "+00";
        }
        if (value instanceof LocalTime t) {
            return time(t);
        }
        if (value instanceof byte[] bytes) {
            StringBuilder b = new StringBuilder(2 + 2 * bytes.length).append("\\x");
            for (byte x : bytes) {
                b.append(Character.forDigit((x >> 4) & 0xF, 16)).append(Character.forDigit(x & 0xF, 16));
            }
            return b.toString();
        }
        if (value instanceof PgArray a) {            // holds the array's text as pgoutput sent it
            return a.toString();
        }
        if (value instanceof PGInterval i) {
            return interval(i);
        }
        if (value instanceof PGobject o) {           // point, box, circle, line, lseg, path, polygon
            return o.getValue();
        }
        return value.toString();
    }

    private static String special(SpecialValueDecimal d) {
        String s = d.toString();
        if (s.contains("NAN") || s.contains("NaN")) {
            return "NaN";
        }
        return s.startsWith("-") || s.contains("NEGATIVE") ? "-Infinity" : "Infinity";
    }

    private static String date(int isoYear, int month, int day, String tail) {
        // ISO year 0 is 1 BC: PostgreSQL writes BC years from 1 upwards.
        boolean bc = isoYear <= 0;
        return String.format("%04d-%02d-%02d%s%s", bc ? 1 - isoYear : isoYear, month, day, tail, bc ? " BC" : "");
    }

    private static String timestamp(LocalDateTime t, String zone) {
        return date(t.getYear(), t.getMonthValue(), t.getDayOfMonth(), " " + time(t.toLocalTime()) + zone);
    }

    private static String time(LocalTime t) {
        return String.format("%02d:%02d:%02d.%06d", t.getHour(), t.getMinute(), t.getSecond(), t.getNano() / 1000);
    }

    /** Months, days and the time part stay apart, to the microsecond (no floating-point seconds). */
    private static String interval(PGInterval i) {
        long micros = (long) i.getWholeSeconds() * 1_000_000L + i.getMicroSeconds();
        String sign = micros < 0 ? "-" : "";
        micros = Math.abs(micros);
        return String.format("%d years %d mons %d days %d hours %d mins %s%d.%06d secs", i.getYears(), i.getMonths(),
                i.getDays(), i.getHours(), i.getMinutes(), sign, micros / 1_000_000L, micros % 1_000_000L);
    }
}
