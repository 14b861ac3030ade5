"""The wheel a team installs into its own Airflow (pyproject.toml): built from the checkout, installed
into a fresh venv outside it, and used from there with nothing of the checkout on the path — the
`tideline` command, the SQL and Spark entrypoints packed inside, Airflow finding the view by the
wheel's entry point and the pipelines' DAGs by a one-line DAG file.

The fresh venv sees the dev venv's packages through a .pth file instead of downloading Airflow and
Spark again: what is tested here is the wheel's own contents and declarations (and `pip check`
holds its dependency ranges to the pinned set). The pipeline run end to end with an installed
Tideline is the integration suite's (tests/integration)."""
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(base / "dist"), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    [wheel] = (base / "dist").glob("tideline-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    [site] = (venv / "lib").glob("python3*/site-packages")
    (site / "dev-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--no-index", str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr
    home = base / "home"
    (home / "airflow" / "dags").mkdir(parents=True)
    (home / "pipelines").mkdir()
    (home / "pipelines" / "demo.yaml").write_text((ROOT / "pipelines" / "demo.yaml").read_text())
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(home), "AIRFLOW_HOME": str(home / "airflow"),
           "TIDELINE_PIPELINES": str(home / "pipelines"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}

    def run(*args, **kw):
        return subprocess.run(list(args), capture_output=True, text=True, cwd=home, env={**env, **kw}, timeout=300)
    return venv, home, wheel, run


def test_the_wheel_holds_the_library_its_sql_and_its_spark_entrypoints(installed):
    venv, _home, wheel, run = installed
    code = ("import tideline, json; from tideline import JOBS, sqlfiles; "
            "print(json.dumps({'package': tideline.__file__, 'jobs': sorted(p.name for p in JOBS.iterdir()), "
            "'migrations': len(sqlfiles.names('state')), 'chart': (tideline.PACKAGE / 'view' / 'node_modules' / "
            "'chart.js' / 'dist' / 'chart.umd.min.js').is_file()}))")
    out = run(str(venv / "bin" / "python"), "-c", code)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["package"].startswith(str(venv)), found   # the installed copy, not the checkout's
    assert {"full_load.py", "incremental.py", "batch_sync.py", "maintain.py", "log4j2.properties"} <= set(found["jobs"])
    assert found["migrations"] == len(list((ROOT / "sql" / "state").glob("*.sql")))
    assert found["chart"], "the view's charting library is in the wheel"
    requires = next(line for line in run(str(venv / "bin" / "pip"), "show", "tideline").stdout.splitlines()
                    if line.startswith("Requires:"))
    assert "apache-airflow" in requires and not any(dev in requires for dev in ("pytest", "selenium", "mkdocs"))
    checked = run(str(venv / "bin" / "pip"), "check")
    assert checked.returncode == 0, checked.stdout   # its dependency ranges hold for the pinned set


def test_the_tideline_command_runs_from_the_install(installed):
    venv, home, _wheel, run = installed
    from tideline import __version__
    assert run(str(venv / "bin" / "tideline"), "--version").stdout.strip() == f"tideline {__version__}"
    out = run(str(venv / "bin" / "tideline"), "validate", "--json")
    [found] = json.loads(out.stdout)
    assert out.returncode == 0 and found["pipeline"] == "demo" and found["file"].startswith(str(home)), out


def test_airflow_finds_the_view_by_the_entry_point_and_the_dags_by_a_one_line_file(installed):
    venv, home, _wheel, run = installed
    out = run(str(venv / "bin" / "python"), "-m", "airflow", "plugins", "--output", "json")
    assert out.returncode == 0, out.stderr
    [plugin] = [p for p in json.loads(out.stdout) if p["name"] == "tideline"]
    assert "EntryPoint(name='tideline', value='tideline.view.plugin:TidelineViewPlugin'" in plugin["source"]
    assert plugin["fastapi_apps"][0]["url_prefix"] == "/tideline"
    dags = home / "airflow" / "dags"
    (dags / "tideline.py").write_text("from tideline.airflow.dags import build_dags; globals().update(build_dags())\n")
    (dags / "tideline_config_errors.py").write_text(
        "from tideline.airflow.dags import raise_broken_pipelines; raise_broken_pipelines()\n")
    code = ("from airflow.dag_processing.dagbag import DagBag; import json; "
            f"b = DagBag(dag_folder={str(dags)!r}); print(json.dumps([sorted(b.dag_ids), sorted(b.import_errors)]))")
    out = run(str(venv / "bin" / "python"), "-c", code)
    assert out.returncode == 0, out.stderr
    ids, errors = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"sync_demo", "watch_demo", "verify_demo", "batch_demo"} <= set(ids) and errors == [], (ids, errors)
    (home / "pipelines" / "broken.yaml").write_text("name: broken\n")
    try:
        out = run(str(venv / "bin" / "python"), "-c", code)
        ids, errors = json.loads(out.stdout.strip().splitlines()[-1])
        assert "sync_demo" in ids and errors == [str(dags / "tideline_config_errors.py")], (ids, errors)
    finally:
        os.remove(home / "pipelines" / "broken.yaml")
