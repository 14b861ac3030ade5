UPDATE tideline.runs SET ended_at = now(), rows = %(rows)s, outcome = %(outcome)s, detail = %(detail)s,
       counts = %(counts)s::jsonb
 WHERE run_id = %(run_id)s;
