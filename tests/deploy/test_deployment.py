"""`make deploy-test`: the container deployment built and run as docs/deploy.md says, then broken.

Images built with podman from the mmdebstrap base (docker/images.sh); the compose stack started by
docker/up.sh with the trial databases; a PostgreSQL -> PostgreSQL and a PostgreSQL -> Iceberg
pipeline triggered through Airflow's REST API with a writer running in the source. Then, each
time with the writer running and checked equal after it stops:
  (a) `down` and `up`: every container recreated, the streams resume with no reload (the lake
      verified after (b), no table reloaded between);
  (b) kill -9 of a broker's process, then of the scheduler's, under one writer: it heals by itself;
  (c) decommission with the pipelines folder mounted read-only refuses before touching anything;
      then decommission for real leaves no connector, slot, topic (the heartbeat's too) or state;
  (d) the ports published on the host's addresses: Airflow's only.
It prints the RESULT line the issue asks for. Runs first in `make test` (tests/deploy sorts before
tests/integration), on a machine the local stack has not started on yet, and removes its
containers and volumes when done (the images stay: a rerun reuses their layers)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import pytest

from compose import ROOT, Deployment, run, wait_until

pytestmark = pytest.mark.deploy

PROJECT = "tideline-deploytest"
PIPELINES = {
    "pg_to_pg": """name: pg_to_pg
source: {conn_id: tideline_source, schema: public}
target: {conn_id: tideline_target, schema: trial}
kafka: {conn_id: tideline_kafka, topic_prefix: tideline.pg_to_pg}
tables: [{name: customers}, {name: orders}]
""",
    "pg_to_lake": """name: pg_to_lake
source: {conn_id: tideline_source, schema: public}
target: {kind: iceberg, catalog: tideline_lake, namespace: trial}
kafka: {conn_id: tideline_kafka, topic_prefix: tideline.pg_to_lake}
stream: {trigger_interval_s: 5}
tables: [{name: orders}]
""",
}
SOURCE_SCHEMA = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, tier int NOT NULL, updated_at timestamptz NOT NULL);
CREATE TABLE orders (id bigserial PRIMARY KEY, customer_id int NOT NULL, amount numeric(12,2), note text,
                     created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO customers SELECT g, 'customer ' || g, g % 5, now() FROM generate_series(1, 2000) g;
INSERT INTO orders (customer_id, amount, note) SELECT 1 + g % 2000, (g % 997) / 7.0, md5(g::text)
  FROM generate_series(1, 30000) g;
CREATE TABLE writer_control (run boolean NOT NULL);
INSERT INTO writer_control VALUES (false);
-- a writer that commits every 200 ms until writer_control says stop: inserts, updates, deletes
CREATE PROCEDURE trial_writer() LANGUAGE plpgsql AS $$
DECLARE top bigint;
BEGIN
  LOOP
    EXIT WHEN NOT (SELECT run FROM writer_control);
    INSERT INTO orders (customer_id, amount, note)
      SELECT 1 + (random() * 1999)::int, round((random() * 500)::numeric, 2), md5(random()::text)
      FROM generate_series(1, 20);
    SELECT max(id) INTO top FROM orders;
    UPDATE orders SET amount = amount + 1, note = 'updated' WHERE id BETWEEN top - 400 AND top - 395;
    DELETE FROM orders WHERE id = top - (random() * 3000)::int;
    UPDATE customers SET tier = tier + 1, updated_at = now() WHERE id = 1 + (random() * 1999)::int;
    COMMIT;
    PERFORM pg_sleep(0.2);
  END LOOP;
END $$;
"""
DIGESTS = {
    "customers": "SELECT count(*) || ':' || coalesce(md5(string_agg(concat_ws(',', id, name, tier, updated_at), '|' "
                 "ORDER BY id)), '') FROM {schema}customers",
    "orders": "SELECT count(*) || ':' || coalesce(md5(string_agg(concat_ws(',', id, customer_id, amount, note, "
              "created_at), '|' ORDER BY id)), '') FROM {schema}orders",
}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    results: dict[str, str] = {}
    started = time.monotonic()
    run(["bash", str(ROOT / "docker" / "images.sh")], timeout=1800)
    results["build_s"] = f"{time.monotonic() - started:.0f}"
    results["images"] = str(sum(run(["podman", "image", "exists", f"localhost/tideline-{target}:latest"],
                                    check=False).returncode == 0 for target in ("kafka", "airflow", "postgres")))
    d = Deployment.prepare(tmp_path_factory.mktemp("deploy"), PROJECT)
    d.compose("down", "-v", check=False)   # what an interrupted earlier run left
    started = time.monotonic()
    try:
        d.up()
        results["up_s"] = f"{time.monotonic() - started:.0f}"
        d.source(SOURCE_SCHEMA)
        yield d, results
    except Exception:
        for service in d.containers():
            print(f"--- {service}\n{d.logs(service)}")
        raise
    finally:
        if os.environ.get("TIDELINE_KEEP_DEPLOYMENT") != "1":
            d.compose("down", "-v", check=False)


class Writer:
    def __init__(self, d: Deployment):
        self.d = d

    def __enter__(self):
        self.d.source("UPDATE writer_control SET run = true")
        self.proc = subprocess.Popen(["podman", "exec", self.d.container("source"), "psql", "-X", "-q", "-U", "app",
                                      "-d", "app", "-c", "CALL trial_writer()"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        wait_until(lambda: self._running() or self.proc.poll() is not None, 60, "the writer to start", every=1)
        assert self.proc.poll() is None, f"the writer ended at once: {self.proc.stderr.read()}"
        return self

    def _running(self) -> bool:
        return self.d.source("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CALL trial_writer%'")[0][0] != "0"

    def __exit__(self, *exc):
        self.d.source("UPDATE writer_control SET run = false")
        wait_until(lambda: not self._running(), 60, "the writer to stop", every=1)
        self.proc.wait(timeout=60)


def phases(d: Deployment) -> dict:
    """(pipeline, table) -> (phase, snapshot id): a reload makes a new snapshot id."""
    return {(p, t): (phase, snap) for p, t, phase, snap in d.warehouse(
        "SELECT pipeline, table_name, phase, coalesce(snapshot_id, '') FROM tideline.table_state ORDER BY 1, 2")}


def pg_equal(d: Deployment) -> bool:
    return all(d.source(q.format(schema="public."))[0] == d.warehouse(q.format(schema="trial."))[0]
               for q in DIGESTS.values())


def assert_equal_everywhere(d: Deployment, streaming: dict, what: str, verify: bool = True) -> None:
    """Writer stopped: the PostgreSQL target row for row equal to the source, and (verify) `tideline
    verify` of both pipelines equal; every table still streaming from the snapshot it was loaded
    from. Without verify (a phase between two that verify), the lake is checked by the next: no
    table reloaded meanwhile (its snapshot id the same), so what it lost would still be missing."""
    wait_until(lambda: pg_equal(d), 600, f"pg_to_pg to catch up ({what})")
    for pipeline in ("pg_to_pg", "pg_to_lake") if verify else ():
        wait_until(lambda: d.tideline("verify", "--pipeline", pipeline, check=False).returncode == 0, 600,
                   f"{pipeline} to verify equal ({what})", every=10)
    assert phases(d) == streaming, f"a table was reloaded or left streaming ({what})"


def test_the_deployment_builds_runs_heals_and_retires(deployment):
    d, results = deployment
    for name, text in PIPELINES.items():   # docs/deploy.md step 5: a YAML in the pipelines folder
        path = d.pipelines / f"{name}.yaml"
        path.write_text(text)
        os.chown(path, 50000, 0)
    with Writer(d):
        for name in PIPELINES:
            d.trigger(f"sync_{name}")
        wait_until(lambda: {ph for ph, _ in phases(d).values()} == {"streaming"} and len(phases(d)) == 3, 900,
                   "both pipelines to load and stream", every=10)
        time.sleep(10)
    streaming = phases(d)
    # the production profile of the deployment: replication 3, checked by the doctor
    topics = json.loads(d.in_airflow(
        "import json; from confluent_kafka.admin import AdminClient; "
        "md = AdminClient({'bootstrap.servers': 'kafka-1:9092'}).list_topics(timeout=30); "
        "print(json.dumps({t: len(m.partitions[0].replicas) for t, m in md.topics.items() if t.startswith('tideline.')}))"))
    assert topics and set(topics.values()) == {3}, topics
    assert_equal_everywhere(d, streaming, "after the full loads and the first changes")
    results["pipelines"] = "equal"

    # (a) every container recreated: down keeps the volumes, up makes new containers
    before = d.containers("Id")
    writer = Writer(d).__enter__()
    time.sleep(10)
    d.compose("down", timeout=600)   # the writer's session ends with the source's container
    writer.proc.wait(timeout=60)
    d.up()
    d.source("UPDATE writer_control SET run = false")
    after = d.containers("Id")
    assert set(after) == set(before) and not set(before.values()) & set(after.values()), "a container was kept"
    with Writer(d):
        time.sleep(20)
    assert_equal_everywhere(d, streaming, "after every container was recreated", verify=False)
    results["recreated"] = "equal"

    # (b) kill -9 of a broker, then of the scheduler (the Spark drivers run in its container), under
    # one writer: each is brought back by its restart policy, then one check of both pipelines
    with Writer(d):
        broker = d.kill9("kafka-2")
        wait_until(lambda: d.pid("kafka-2") not in (0, broker), 120, "kafka-2 to be restarted by its policy")
        time.sleep(15)
        scheduler = d.kill9("airflow-scheduler")
        wait_until(lambda: d.pid("airflow-scheduler") not in (0, scheduler), 120,
                   "the scheduler to be restarted by its policy")
        time.sleep(30)
    assert_equal_everywhere(d, streaming, "after kill -9 of a broker and then of the scheduler")
    results["broker_kill"] = results["scheduler_kill"] = "equal"

    # (c) decommission where the pipelines folder is mounted read-only: refused, nothing touched
    held = held_by(d, "pg_to_lake")
    assert all(held.values()), held
    run(["mount", "--bind", str(d.pipelines), str(d.pipelines)])
    try:
        run(["mount", "-o", "remount,bind,ro", str(d.pipelines)])
        refused = d.compose("--profile", "cli", "run", "--rm", "--no-deps", "tideline", "decommission", "pg_to_lake", "--confirm", "pg_to_lake",
                            check=False)
    finally:
        run(["umount", str(d.pipelines)])
    assert refused.returncode != 0 and "nothing was touched" in refused.stdout + refused.stderr, refused
    assert held_by(d, "pg_to_lake") == held, "a refused decommission took something down"
    assert (d.pipelines / "pg_to_lake.yaml").exists()
    done = d.compose("--profile", "cli", "run", "--rm", "--no-deps", "tideline", "decommission", "pg_to_lake", "--confirm", "pg_to_lake")
    assert "removed" in done.stdout, done.stdout
    wait_until(lambda: not any(held_by(d, "pg_to_lake").values()), 120, "decommission to leave nothing behind")
    assert (d.pipelines / "pg_to_lake.yaml.decommissioned").exists()
    with Writer(d):
        time.sleep(10)
    wait_until(lambda: pg_equal(d), 300, "pg_to_pg to go on streaming beside the decommission")
    results["decommission_ro"] = "clean"

    # (d) what the host's own addresses answer on, of every port a part listens on in its container
    published = d.published_ports()
    assert set(published) == {"airflow-api-server"}, published
    addresses = {a for a in socket.gethostbyname_ex(socket.gethostname())[2] if not a.startswith("127.")} or {"0.0.0.0"}
    listening = [5432, 8080, 8083, 9092, 9093]
    open_ports = sorted({p for a in addresses for p in listening if _answers(a, p)})
    assert open_ports == [8080], open_ports
    results["published"] = f"[{','.join(map(str, open_ports))}]"

    line = "RESULT " + " ".join(f"{k}={results[k]}" for k in (
        "images", "build_s", "up_s", "pipelines", "recreated", "broker_kill", "scheduler_kill", "decommission_ro",
        "published"))
    print(line)
    (ROOT / "artifacts").mkdir(exist_ok=True)
    (ROOT / "artifacts" / "deploy-test.txt").write_text(line + "\n")


def held_by(d: Deployment, pipeline: str) -> dict[str, bool]:
    """What a pipeline holds in each part: its connector, replication slot, topics (the
    heartbeat's included) and state rows."""
    connectors = json.loads(d.in_airflow(
        "import urllib.request; print(urllib.request.urlopen('http://connect:8083/connectors', timeout=30).read().decode())"))
    topics = json.loads(d.in_airflow(
        "import json; from confluent_kafka.admin import AdminClient; "
        "print(json.dumps(list(AdminClient({'bootstrap.servers': 'kafka-1:9092'}).list_topics(timeout=30).topics)))"))
    slots = [r[0] for r in d.source("SELECT slot_name FROM pg_replication_slots")]
    state = d.warehouse(f"SELECT count(*) FROM tideline.table_state WHERE pipeline = '{pipeline}'")[0][0]
    return {"connector": any(pipeline in c for c in connectors),
            "slot": any(pipeline in s for s in slots),
            "topics": any(pipeline in t for t in topics),
            "heartbeat topic": any(t.startswith("__debezium-heartbeat") and pipeline in t for t in topics),
            "state": state != "0"}


def _answers(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((address, port)) == 0
