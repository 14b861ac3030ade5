"""Change capture set up and kept: which tables can be carried (refusals, before any work), and the
Debezium connector, its topics and the source's position (connector)."""
