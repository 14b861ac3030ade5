"""`python -m tideline COMMAND`: the commands a deployment without the Makefile runs."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args):
    return subprocess.run([sys.executable, "-m", "tideline", *args], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "plugins"), "PATH": "/usr/bin:/bin"})


def test_validate_checks_the_files_it_is_given_offline(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\nsource: {conn_id: s}\ntarget: {conn_id: t}\nkafka: {topic_prefix: p}\n"
                   "tables: [{name: a, deletes: sometimes}]\n")
    good = run("validate", str(ROOT / "pipelines" / "demo.yaml"))
    assert good.returncode == 0 and "ok" in good.stdout and "pipeline demo" in good.stdout
    refused = run("validate", str(bad))
    assert refused.returncode == 1 and "INVALID" in refused.stdout and str(bad) in refused.stdout, refused


def test_help_lists_the_commands_and_an_unknown_one_is_refused():
    listed = run("--help")
    assert listed.returncode == 0
    for command in ("validate", "status", "doctor", "pause", "resume", "remove", "decommission", "orphans", "verify"):
        assert command in listed.stdout, (command, listed.stdout)
    unknown = run("frobnicate")
    assert unknown.returncode == 2 and "No such command 'frobnicate'" in unknown.stderr


def test_version_and_json():
    from tideline import __version__
    assert run("--version").stdout.strip() == f"tideline {__version__}"
    import json
    out = run("validate", "--json", str(ROOT / "pipelines" / "demo.yaml"))
    [found] = json.loads(out.stdout)
    assert out.returncode == 0 and found["valid"] and found["pipeline"] == "demo" and found["problems"] == []


def test_a_lifecycle_action_is_checked_as_the_dag_checks_it_before_airflow_is_asked(tmp_path):
    refused = run("pause", "demo", "--tables", "nosuch", "--pipelines-dir", str(ROOT / "pipelines"))
    assert refused.returncode == 2 and "pipeline demo has no table 'nosuch'" in refused.stderr, refused
    unset = run("pause", "demo", "--tables", "orders", "--pipelines-dir", str(ROOT / "pipelines"))
    assert unset.returncode == 2 and "TIDELINE_AIRFLOW_USER" in unset.stderr, unset
    wrong = run("decommission", "demo", "--confirm", "dmeo", "--pipelines-dir", str(tmp_path))
    assert wrong.returncode == 2 and "demo" in wrong.stderr, wrong
