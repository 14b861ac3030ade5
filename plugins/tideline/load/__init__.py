"""Loading rows from a snapshot: the full load (one consistent snapshot, key-range tasks, a shadow
swapped in with the state), the COPY pipe its tasks run, and batch mode (an interval of rows by a
cursor column, upserted)."""
