-- The table's kind; information_schema shows only what the connection's user may access.
SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %(schema)s AND TABLE_NAME = %(table)s;
