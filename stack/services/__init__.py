"""The local stack's services, one module each (postgres, mariadb, kafka, connect, airflow, spark)
over a common base (paths, ports, waiting) and supervisor; `stack/stackctl.py` is the command line
over them. Adding a service is one new module and one line in stackctl's PARTS."""
