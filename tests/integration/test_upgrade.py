"""An upgrade with the stream running: a pipeline loaded and streaming on the previous release
(the commit issue 74's work started from, tagged v0.1.0, checked out with `git worktree`), then the
state migrations of this code applied while that stream still runs and a writer goes on, then the
old stream stopped as a deployment's rollout stops it (SIGTERM, then SIGKILL) and this code's sync DAG run on the
same pipeline. Nothing is reloaded (one full load in the run history, the snapshot kept), nothing
lost or duplicated (the target row for row equal to the source).

The old release runs as its own Python process with its checkout first on the path and its own
DAG files, against the same local stack: what a team's Airflow runs before `pip install -U`."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import stackctl
from helpers import drop_source, full_loads, table_digest, wait_until
from test_dags import make_table
from tideline import state

pytestmark = pytest.mark.integration

PREVIOUS_RELEASE = "bcf4acd"   # v0.1.0: issue 73 resolved, before the wheel and the container deployment

RUN_SYNC = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
run = bag.dags[sys.argv[2]].test(run_conf={"stream_mode": sys.argv[3]} if sys.argv[3] else {})
print(json.dumps({ti.task_id: ti.state for ti in run.get_task_instances()} | {"__run__": run.state}))
"""


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory):
    where = tmp_path_factory.mktemp("release") / "tideline"
    subprocess.run(["git", "-C", str(stackctl.ROOT), "worktree", "add", "--detach", str(where), PREVIOUS_RELEASE],
                   check=True, capture_output=True, timeout=120)
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(stackctl.ROOT), "worktree", "remove", "--force", str(where)],
                       capture_output=True, timeout=120)


def _sync(code_root, pipelines_dir, dag_id: str, stream_mode: str, background: bool = False):
    env = {**os.environ, "PYTHONPATH": f"{code_root / 'plugins'}:{code_root}", "TIDELINE_HOME": str(code_root),
           "AIRFLOW__CORE__DAGS_FOLDER": str(code_root / "dags"), "TIDELINE_PIPELINES": str(pipelines_dir)}
    cmd = [sys.executable, "-c", RUN_SYNC, str(code_root / "dags"), dag_id, stream_mode]
    if background:   # its output in a file beside the checkout: a pipe nobody reads would fill and stop it
        log = open(code_root.parent / "previous-release.log", "w")
        return subprocess.Popen(cmd, env=env, cwd=code_root, stdout=log, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    out = subprocess.run(cmd, env=env, cwd=code_root, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    import json
    return json.loads(out.stdout.strip().splitlines()[-1])


def _tail(code_root, chars: int = 4000) -> str:
    return (code_root.parent / "previous-release.log").read_text()[-chars:]


def test_an_upgrade_with_the_stream_running_reloads_nothing_and_loses_nothing(
        previous_release, source_db, target_db, pipelines, unique_name):
    t = f"{unique_name}_upg"
    make_table(source_db, t, 5000)
    old = None
    try:
        cfg = pipelines.adopt(pipelines.make([{"name": t}], partitions=1, create_topics=False))
        # the previous release: full load, then its stream left running
        old = _sync(previous_release, pipelines.dir, f"sync_{cfg.name}", "", background=True)
        def old_streams() -> bool:
            assert old.poll() is None, f"the previous release's run ended: {_tail(previous_release)}"
            st = state.get(target_db, cfg.name, t)
            target_db.rollback()
            return st is not None and st.phase == "streaming"
        wait_until(old_streams, 600, "the previous release to load and stream", every=3)
        loaded = state.get(target_db, cfg.name, t)
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE {t} SET qty = qty + 1 WHERE id <= 500")
            cur.execute(f"DELETE FROM {t} WHERE id > 4900")
        try:
            wait_until(lambda: table_digest(source_db, "public", t, "id") == table_digest(target_db, cfg.name, t, "id"),
                       300, "the previous release's stream to apply the first changes")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the previous release said: {_tail(previous_release)}") from None

        # the upgrade: this code's state migrations while the old stream runs and the writer goes on
        state.migrate(target_db)
        with source_db.cursor() as cur:
            cur.execute(f"INSERT INTO {t} SELECT g, 3, 'during' FROM generate_series(6001, 6300) g")
            cur.execute(f"UPDATE {t} SET note = 'upgraded' WHERE id BETWEEN 1000 AND 1200")
        assert old.poll() is None, _tail(previous_release)   # the old stream lived through the migration
        os.killpg(old.pid, signal.SIGTERM)   # the rollout stops the old workers: SIGTERM, then after
        try:                                 # a grace period SIGKILL (a stream task retries; it is not
            old.wait(timeout=30)             # meant to end by itself)
        except subprocess.TimeoutExpired:
            os.killpg(old.pid, signal.SIGKILL)
            old.wait(timeout=60)
        with source_db.cursor() as cur:
            cur.execute(f"INSERT INTO {t} SELECT g, 4, 'after' FROM generate_series(7001, 7100) g")
            cur.execute(f"DELETE FROM {t} WHERE id BETWEEN 2000 AND 2050")

        # this code's DAG on the same pipeline: it resumes from the old stream's offsets
        new = _sync(stackctl.ROOT, pipelines.dir, f"sync_{cfg.name}", "available_now")
        assert new["__run__"] == "success" and new["full_load"] in ("skipped", "success"), new
        assert table_digest(source_db, "public", t, "id") == table_digest(target_db, cfg.name, t, "id")
        after = state.get(target_db, cfg.name, t)
        assert after.phase == "streaming" and after.last_error is None, after.last_error
        assert after.raw["snapshot_id"] == loaded.raw["snapshot_id"], "the table was reloaded"
        assert full_loads(target_db, cfg.name) == 1, "a second full load ran"
    finally:
        if old is not None and old.poll() is None:
            os.killpg(old.pid, signal.SIGKILL)
        drop_source(source_db, t)
