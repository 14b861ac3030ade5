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


def test_no_command_or_an_unknown_one_lists_the_commands():
    assert run("help").returncode == 0 and "validate" in run("help").stdout
    unknown = run("frobnicate")
    assert unknown.returncode == 2 and "no command 'frobnicate'" in unknown.stderr and "doctor" in unknown.stderr
