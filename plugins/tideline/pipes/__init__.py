"""The executor side of a full load: the pipes a source engine gives (a PostgreSQL COPY, MariaDB's
COPY-text lines) and the per-partition copiers Spark runs. Below both the engines (which give a
pipe) and the load (which runs them), and kept light: every executor's Python worker imports them
before its first partition."""
