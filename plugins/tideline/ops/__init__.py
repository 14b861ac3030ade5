"""Operating pipelines: the doctor (pass / warn / fail per part, with the fix), status (where every
table stands, `make status`), alerts (task log and chat webhook)."""
