"""How a column's value travels in a Debezium change event (JSON, without schemas): the
representations Debezium's connectors use, whatever the source. A source's type mapping names one
per column (engines.<kind>); core.debezium.value_expr decodes each into the target's value."""

PG_TEXT = "pgtext"              # PostgreSQL sources: the column's PostgreSQL text (our converter)
TEXT = "text"                   # a JSON string or number whose text is the value's input form
EPOCH_DAYS = "epoch_days"       # io.debezium.time.Date: days since 1970-01-01
EPOCH_MILLIS = "epoch_millis"   # io.debezium.time.Timestamp: ms since 1970-01-01T00:00 (no zone)
EPOCH_MICROS = "epoch_micros"   # io.debezium.time.MicroTimestamp
MICRO_DURATION = "micro_duration"  # io.debezium.time.MicroTime: µs, negative and > 24 h allowed
ZONED = "zoned"                 # io.debezium.time.ZonedTimestamp: ISO-8601 text in UTC
HEX = "hex"                     # bytes as hex (binary.handling.mode=hex)
BITS_LE_HEX = "bits_le_hex"     # io.debezium.data.Bits: little-endian bytes, hex
BOOL_BIT = "bool_bit"           # bit(1): a JSON boolean
YEAR = "year"                   # a number; the binlog reader turns year 0000 into 1900 (outside
                                # YEAR's 1901-2155, so 1900 can only mean 0000)
