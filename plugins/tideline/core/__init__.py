"""Pure core of Tideline: no Airflow, no PySpark, no network — unit-testable in isolation."""
