INSERT INTO tideline.runs (pipeline, table_name, kind, epoch, detail)
VALUES (%(pipeline)s, %(table)s, %(kind)s, %(epoch)s, %(detail)s)
RETURNING run_id;
