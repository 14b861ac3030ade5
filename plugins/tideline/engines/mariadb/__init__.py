"""The MariaDB (and MySQL-protocol) source: its binlog through Debezium's MariaDB connector
(`capture`, GTID positions), the full load's consistent snapshot and keyset reads (`engine`,
`keys`), its rows streamed as COPY text without Spark's JVM (`pipe`), TLS in each client's terms
(`tls`) and verify's side (`verify`). Its type mapping is `types`: each column names the
Debezium representation its changes travel in (core.wire_encodings), which core.debezium decodes."""
from tideline.engines.base import SourceCapabilities, SourceSpec

SOURCE = SourceSpec(kind="mariadb", conn_types=("mysql", "mariadb"),
                    implementation="tideline.engines.mariadb.engine:MariaDbEngine",
                    description="MariaDB 10.6 or later (row-based binlog with GTIDs)",
                    capabilities=SourceCapabilities(capture=True, batch=True, verifies=True, chunked_loads=True,
                                                    pipes=True))
