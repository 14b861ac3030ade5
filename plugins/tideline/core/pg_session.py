"""How every PostgreSQL session of Tideline's that reads or writes values as text is set: they
print and parse values the same way whatever the servers' defaults — ISO dates, exact floats, UTC,
intervals and bytea in their canonical text. The full load's COPY pipes (both ends), a lake load's
JDBC read and the stream's decoding use it. No imports: the executors' pipe imports it."""

SESSION_OPTIONS = ("-c DateStyle=ISO,MDY -c IntervalStyle=postgres -c extra_float_digits=3 -c TimeZone=UTC "
                   "-c bytea_output=hex -c client_encoding=UTF8")
