-- Tables this Airflow task (same DAG run and task, an earlier try) already loaded: a retry of the
-- task loads only the tables whose load failed, not again the ones that landed.
SELECT DISTINCT table_name FROM tideline.runs
 WHERE pipeline = %(pipeline)s AND kind = 'full_load' AND outcome = 'succeeded'
   AND table_name = ANY(%(tables)s::text[])
   AND airflow->>'dag_id' = %(dag_id)s AND airflow->>'dag_run_id' = %(dag_run_id)s
   AND airflow->>'task_id' = %(task_id)s;
