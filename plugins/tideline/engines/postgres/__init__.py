"""The PostgreSQL source: logical decoding through Debezium's pgoutput connector (`capture`), the
full load's consistent snapshot and COPY (`engine`), verify's side (tideline.postgres_sql, shared
with the PostgreSQL target)."""
from tideline.engines.base import SourceCapabilities, SourceSpec

SOURCE = SourceSpec(kind="postgres", conn_types=("postgres", "postgresql"),
                    implementation="tideline.engines.postgres.engine:PostgresEngine",
                    description="PostgreSQL 14 or later (logical replication: a slot and a publication)",
                    capabilities=SourceCapabilities(capture=True, batch=True, verifies=True, chunked_loads=True,
                                                    pipes=True))
