"""Which processes `stackctl down` stops as Spark jobs left by their Airflow task
(stack/services/airflow.py leftover_spark_jobs): real processes, told apart by their arguments and
the stack data folder they were started for."""
import os
import subprocess
import sys

from services.airflow import leftover_spark_jobs
from services.base import ROOT, VAR


def _start(*args: str, var: str) -> subprocess.Popen:
    env = dict(os.environ, TIDELINE_STACK_VAR=var)
    # Popen returns once the child has exec'd (it waits on the exec's error pipe): /proc shows its argv
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *args], env=env)


def test_only_this_stack_s_job_drivers_count_as_leftover_jobs(tmp_path):
    job = str(ROOT.resolve() / "spark_jobs" / "incremental.py")
    log4j = f"-Dlog4j2.configurationFile={ROOT.resolve() / 'spark_jobs' / 'log4j2.properties'}"
    ours = _start(job, "--pipeline", "x", var=str(VAR))
    other_stack = _start(job, "--pipeline", "x", var=str(tmp_path / "secure"))
    not_a_job = _start(log4j, var=str(VAR))   # the tests' own Spark session names the folder only so
    try:
        found = leftover_spark_jobs()
        assert ours.pid in found
        assert other_stack.pid not in found and not_a_job.pid not in found
    finally:
        for p in (ours, other_stack, not_a_job):
            p.kill()
            p.wait()
