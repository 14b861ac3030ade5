"""The Tideline view inside the running Airflow api-server: its JSON API against `tideline.ops.status`,
its login, its Prometheus metrics, the page in a real browser (headless Chromium), and one target
that is down or hangs not breaking the others.

The demo pipeline is driven through Airflow as a user would: a full reload of `customers` (a load
run with progress samples), five changes streamed by a second run, a verify, and one change left
waiting on Kafka so the table has lag and retention headroom to show."""
from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psycopg2
import pytest
from prometheus_client.parser import text_string_to_metric_families

import stackctl
from helpers import run_demo_dag, seed_demo, wait_for_run
from tideline.kafka_offsets import end_offsets

pytestmark = pytest.mark.integration
ROOT = stackctl.ROOT
TOPIC = "tideline.demo.public.customers"


def _token() -> str:
    return stackctl.http_json(f"{stackctl.airflow_url()}/auth/token", "POST",
                              {"username": stackctl.AIRFLOW_ADMIN, "password": stackctl.AIRFLOW_ADMIN_PASS})["access_token"]


def get(path: str, token: str | None = None, raw: bool = False):
    req = urllib.request.Request(f"{stackctl.airflow_url()}/tideline/{path}",
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = resp.read()
    return body if raw else json.loads(body)


def _change_customers(source_db, n: int) -> int:
    """n changed customers, waited for until Debezium put them on Kafka; the topic's event count."""
    from tideline.core.connections import get_connection
    bootstrap = get_connection("tideline_kafka").kafka_bootstrap
    before = sum(end_offsets(bootstrap, TOPIC).values())
    with source_db.cursor() as cur:
        cur.execute("UPDATE customers SET full_name = full_name || ' ✓' WHERE id IN "
                    "(SELECT id FROM customers ORDER BY id LIMIT %s)", (n,))
    deadline = time.time() + 120
    while (now := sum(end_offsets(bootstrap, TOPIC).values())) < before + n:
        assert time.time() < deadline, f"Debezium did not put {n} changes on {TOPIC} within 120s"
        time.sleep(1)
    return now


@pytest.fixture(scope="module")
def demo(stack):
    """The demo pipeline after: a full reload of customers, a run streaming 5 changes, a verify,
    and 1 change waiting on Kafka. Yields the two DAG run ids and an Airflow token."""
    import psycopg2

    from tideline.verify import command as verify
    source_db = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["source"]))
    source_db.autocommit = True
    try:
        seed_demo(source_db)
        load_run, info, tis = run_demo_dag(stack, {"action": "full_reload", "tables": ["customers"],
                                                   "stream_mode": "available_now"})
        assert info["state"] == "success", tis
        _change_customers(source_db, 5)
        stream_run, info, tis = run_demo_dag(stack, {"tables": ["customers"], "stream_mode": "available_now"})
        assert info["state"] == "success", tis
        assert verify.main(["--pipeline", "demo", "--tables", "customers"]) == 0
        _change_customers(source_db, 1)
    finally:
        source_db.close()
    return {"load_run": load_run, "stream_run": stream_run, "token": _token(), "stack": stack}


def test_api_shows_every_table_as_tideline_status_does(demo):
    from tideline.core.config import load_pipeline
    from tideline.ops.status import pipeline_status
    [api] = get("api/pipelines?pipeline=demo", demo["token"])
    expected = {t.table: t for t in pipeline_status(load_pipeline(ROOT / "pipelines" / "demo.yaml"), exact_counts=False)}
    assert api["state"] == "ok" and api["dag_id"] == "sync_demo" and api["error"] is None
    assert [t["table"] for t in api["tables"]] == list(expected)
    for t in api["tables"]:
        want = expected[t["table"]]
        for field in ("phase", "epoch", "target_rows", "rows_estimated", "covered", "events_applied", "error", "load_rows",
                      "verify_outcome", "verify_counts"):
            assert t[field] == getattr(want, field), (t["table"], field)
        what = lambda line: line and line.split(": ", 1)[1]   # noqa: E731  ("3s ago: equal": the age moves on)
        assert what(t["last_verify"]) == what(want.last_verify)
        assert t["lag"] == {str(p): n for p, n in want.lag.items()} and t["lag_total"] == want.lag_total
        assert (t["headroom_s"] is None) == (want.headroom_s is None)
        if want.headroom_s is not None:
            assert abs(t["headroom_s"] - want.headroom_s) < 300
    customers = next(t for t in api["tables"] if t["table"] == "customers")
    assert customers["phase"] == "streaming" and customers["lag_total"] >= 1   # the change left waiting
    assert customers["headroom_s"] > 0 and customers["lag_s"] > 0 and customers["events_applied"] >= 5
    assert customers["verify_outcome"] == "succeeded" and customers["last_verify"].endswith("equal")
    assert api["headroom_alert_s"] == 12 * 3600


def test_history_charts_the_stream_and_links_each_run_to_its_airflow_task(demo, target_db):
    h = get("api/pipelines/demo/tables/customers/history?window=1h", demo["token"])
    assert sum(p["events"] for p in h["series"]) >= 5
    assert all(p["events_per_s"] == round(p["events"] / 60, 3) for p in h["series"])
    assert any(p["lag_s"] is not None and p["batch_s"] is not None for p in h["series"])
    runs = {(r["kind"], (r["airflow"] or {}).get("dag_run_id")): r for r in h["runs"]}
    load = runs[("full_load", demo["load_run"])]
    assert load["outcome"] == "succeeded" and load["airflow"]["task_id"] == "full_load"
    assert load["links"]["task_log"].startswith(f"dags/sync_demo/runs/{urllib.parse.quote(demo['load_run'], safe='')}"
                                                f"/tasks/full_load?try_number=")
    assert runs[("incremental", demo["stream_run"])]["links"]["dag_run"].endswith(
        urllib.parse.quote(demo["stream_run"], safe=""))
    progress = [p for p in h["progress"] if p["run_id"] == load["run_id"]]
    assert len(progress) >= 2 and progress[0]["rows"] == 0 and progress[-1]["rows"] == load["rows"]
    with target_db.cursor() as cur:
        cur.execute("SELECT count(*) FROM demo.customers")
        assert load["rows"] == cur.fetchone()[0]
    with pytest.raises(urllib.error.HTTPError) as bad:
        get("api/pipelines/demo/tables/customers/history?window=2h", demo["token"])
    assert bad.value.code == 422 and "is not one of 1h, 24h, 7d" in bad.value.read().decode()
    with pytest.raises(urllib.error.HTTPError) as missing:
        get("api/pipelines/demo/tables/nope/history", demo["token"])
    assert missing.value.code == 404 and "has no table 'nope'" in missing.value.read().decode()
    for name in ("nope", "..%2Fpipelines%2Fdemo", "Demo"):
        with pytest.raises(urllib.error.HTTPError) as unknown:
            get(f"api/pipelines/{name}/tables/customers/history", demo["token"])
        assert unknown.value.code == 404, name


def test_view_is_behind_airflows_login(demo):
    with pytest.raises(urllib.error.HTTPError) as no_token:
        get("api/pipelines")
    assert no_token.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as forged:
        get("metrics", token="not.a.jwt")
    assert forged.value.code in (401, 403)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    with pytest.raises(urllib.error.HTTPError) as page:
        urllib.request.build_opener(NoRedirect).open(f"{stackctl.airflow_url()}/tideline/", timeout=30)
    assert page.value.code == 302
    assert urllib.parse.urljoin(f"{stackctl.airflow_url()}/tideline/", page.value.headers["Location"]) == \
        f"{stackctl.airflow_url()}/auth/login?next={urllib.parse.quote(stackctl.airflow_url() + '/tideline/', safe='')}"


def test_metrics_parse_as_prometheus_text_and_carry_every_documented_metric(demo):
    from tideline.view.metrics import METRICS
    text = get("metrics", demo["token"], raw=True).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(METRICS) <= set(fams), sorted(set(METRICS) - set(fams))
    samples = [s for f in fams.values() for s in f.samples if s.labels.get("pipeline") == "demo"]

    def value(name, **labels):
        return [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    [api] = get("api/pipelines?pipeline=demo", demo["token"])
    customers = next(t for t in api["tables"] if t["table"] == "customers")
    assert value("tideline_pipeline_up") == [1.0]
    assert value("tideline_table_phase", table="customers", phase="streaming") == [1.0]
    assert sum(value("tideline_lag_events", table="customers")) == customers["lag_total"]
    assert value("tideline_events_applied_total", table="customers") == [float(customers["events_applied"])]
    assert value("tideline_verify_equal", table="customers") == [1.0]
    assert value("tideline_verify_differences", table="customers", kind="different") == [0.0]
    assert value("tideline_retention_headroom_seconds", table="customers")[0] > 0
    assert "# HELP tideline_lag_seconds" in text


def _signed_in_browser(profile: Path, user: str, password: str):
    """Headless Chromium signed in to Airflow as `user`, inside the Tideline view's frame (the
    view's entry in Airflow's navigation), its first refresh done."""
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1800",
                "--disable-gpu", f"--user-data-dir={profile}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path="/usr/bin/chromedriver"))
    try:
        wait = WebDriverWait(driver, 60)
        driver.get(f"{stackctl.airflow_url()}/plugin/tideline")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "input[name=username]"))   # Airflow's login page
        driver.find_element(By.CSS_SELECTOR, "input[name=username]").send_keys(user)
        driver.find_element(By.CSS_SELECTOR, "input[name=password]").send_keys(password)
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        frame = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "iframe[src*='/tideline/']"))[0]
        driver.switch_to.frame(frame)
        wait.until(lambda d: d.execute_script("return !!(window.tideline && window.tideline.history)"))
    except BaseException:
        driver.quit()
        raise
    return driver


def test_the_page_in_a_real_browser_shows_tables_headroom_and_drawn_charts(demo, tmp_path, record_property,
                                                                            target_db):
    from tideline import state
    # a load of demo.customers in progress (its run, what it expects, two fresh samples): its bar
    load = state.run_start(target_db, "demo", "customers", "full_load", None, "view test: a load in progress")
    state.expect_rows(target_db, load, 200_000)
    with target_db.cursor() as cur:
        cur.execute("INSERT INTO tideline.load_progress (run_id, at, rows, bytes) VALUES "
                    "(%s, now() - interval '10 seconds', 0, 0), (%s, now(), 50000, 0)", (load, load))
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    driver = _signed_in_browser(tmp_path / "chromium", stackctl.AIRFLOW_ADMIN, stackctl.AIRFLOW_ADMIN_PASS)
    shot = tmp_path / "tideline-view.png"
    try:
        wait = WebDriverWait(driver, 60)
        row = driver.find_element(By.CSS_SELECTOR, "[data-pipeline=demo] tr[data-table=customers]")
        driver.execute_script("arguments[0].click()", row)
        wait.until(lambda d: d.find_element(By.ID, "detail-title").text == "demo.customers"
                   and d.execute_script("return !!window.tideline.history && window.tideline.history.series.length > 0"))
        tables = [e.get_attribute("data-table") for e in driver.find_elements(By.CSS_SELECTOR, "[data-pipeline=demo] tr[data-table]")]
        from tideline.core.config import load_pipeline
        assert tables == [t.name for t in load_pipeline(ROOT / "pipelines" / "demo.yaml").tables]
        bar = row.find_element(By.CSS_SELECTOR, ".load-bar[role=progressbar]")
        assert bar.get_attribute("aria-valuenow") == "25" and float(bar.get_attribute("data-load-eta-s")) > 0
        assert "50,000 of 200,000 rows stored (25%)" in row.text and "ETA" in row.text
        headroom = row.find_element(By.CSS_SELECTOR, "[data-headroom-s]")
        assert float(headroom.get_attribute("data-headroom-s")) > 0 and headroom.text
        assert "headroom-ok" in headroom.get_attribute("class")   # days of retention: not under the 12 h alert
        # the selected table's actions, and one done from the page: a validate, as the signed-in user
        buttons = {b.get_attribute("data-action"): b for b in driver.find_elements(By.CSS_SELECTOR, "#actions button")}
        # (the demo's runs were available_now: no stream holds customers now, so Start comes first)
        assert list(buttons) == ["auto", "pause", "full_reload", "validate", "repair"], list(buttons)
        driver.execute_script("arguments[0].click()", buttons["validate"])
        result = wait.until(lambda d: d.find_element(By.ID, "action-result").get_attribute("data-dag-run-id")
                            and d.find_element(By.ID, "action-result"))
        assert "sync_demo triggered (validate of customers)" in result.text, result.text
        page_run = result.get_attribute("data-dag-run-id")
        drawn = driver.execute_script("""
            const out = {};
            for (const id of ["chart-events", "chart-lag", "chart-duration", "chart-load", "chart-runs"]) {
              const canvas = document.getElementById(id), chart = Chart.getChart(canvas);
              const px = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
              let inked = 0; for (let i = 3; i < px.length; i += 4) if (px[i] > 0) inked++;
              out[id] = {points: chart ? chart.data.datasets.reduce((n, d) => n + d.data.length, 0) : 0, inked};
            }
            return out;""")
        driver.switch_to.default_content()
        driver.save_screenshot(str(shot))
    finally:
        driver.quit()
        with target_db.cursor() as cur:
            cur.execute("UPDATE tideline.runs SET outcome = 'failed', ended_at = now(), detail = detail || ' (ended)' "
                        "WHERE run_id = %s", (load,))
    # the validate ran (it finds the one change the fixture left waiting on Kafka: a failed task, by design)
    info, tis = wait_for_run(demo["stack"], "sync_demo", page_run)
    assert info["state"] in ("success", "failed") and tis["validate"] in ("success", "failed"), tis
    record_property("screenshot", str(shot))
    print(f"\nscreenshot of the Tideline view: {shot}")
    for chart, fig in drawn.items():
        assert fig["points"] > 0 and fig["inked"] > 1000, (chart, fig)
    assert shot.stat().st_size > 10_000


def test_a_target_that_is_down_or_hangs_shows_as_such_and_spares_the_others(stack, pipelines, source_db, monkeypatch):
    """In-process, the function behind the page: three pipelines, one on the real stack, one whose
    target refuses connections, one whose target accepts and never answers."""
    import yaml

    from tideline.core.connections import get_connection
    from tideline.view.overview import overview
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{pipelines.name} (id bigint PRIMARY KEY)")
    try:
        cfg = pipelines.make([{"name": pipelines.name}])
        hang = socket.socket()
        hang.bind(("127.0.0.1", 0))
        hang.listen(8)   # the kernel completes connections; nobody ever answers
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))   # bound, not listening: connections are refused
        for name, port in (("refused", closed.getsockname()[1]), ("hangs", hang.getsockname()[1])):
            monkeypatch.setenv(f"AIRFLOW_CONN_TARGET_{name.upper()}", f"postgresql://u:p@127.0.0.1:{port}/db")
            data = yaml.safe_load((pipelines.dir / f"{cfg.name}.yaml").read_text())
            data.update(name=f"{cfg.name}_{name}", target={"conn_id": f"target_{name}", "schema": "x"})
            (pipelines.dir / f"{cfg.name}_{name}.yaml").write_text(yaml.safe_dump(data))
        (pipelines.dir / "broken.yaml").write_text("name: broken\nsource: {}\n")
        started = time.monotonic()
        views = {v.name: v for v in overview(Path(pipelines.dir), get_connection, timeout_s=4)}
        took = time.monotonic() - started
        hang.close()
        closed.close()
    finally:
        with source_db.cursor() as cur:
            cur.execute(f"DROP TABLE public.{pipelines.name}")
    assert views[cfg.name].state == "ok" and [t.table for t in views[cfg.name].tables] == [cfg.name]
    assert views[cfg.name].tables[0].phase == "new"
    refused = views[f"{cfg.name}_refused"]
    assert refused.state == "error" and "OperationalError" in refused.error and "refused" in refused.error.lower()
    hung = views[f"{cfg.name}_hangs"]
    assert hung.state in ("timeout", "error") and hung.tables == []
    assert ("no answer within 4s" in hung.error) if hung.state == "timeout" else ("timeout" in hung.error.lower())
    assert views["broken"].state == "invalid" and "source" in views["broken"].error
    print(f"overview of 4 pipelines (one refusing, one hanging, one invalid) answered in {took:.1f}s")


def test_a_load_shows_as_running_while_it_samples_and_not_after_its_driver_was_killed(
        stack, pipelines, source_db, target_db):
    """A killed load leaves its run 'running' (the next run of the table closes it): status shows
    its rows only while its samples are fresh."""
    from tideline import state
    from tideline.core.connections import get_connection
    from tideline.ops.status import pipeline_status, render
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{pipelines.name} (id bigint PRIMARY KEY)")
    try:
        cfg = pipelines.make([{"name": pipelines.name}])
        state.migrate(target_db)
        epoch = state.claim_epoch(target_db, cfg.name, pipelines.name, "test", cfg.topic(pipelines.name))
        run_id = state.run_start(target_db, cfg.name, pipelines.name, "full_load", epoch)
        with target_db.cursor() as cur:
            cur.execute("INSERT INTO tideline.load_progress (run_id, at, rows, bytes) VALUES "
                        "(%s, now() - interval '10 seconds', 0, 0), (%s, now(), 50000, 0)", (run_id, run_id))
        # the load's snapshot: a transaction of the source role, open while it reads
        snapshot = psycopg2.connect(get_connection(cfg.source.conn_id).postgres_dsn())
        try:
            snapshot.cursor().execute("SELECT txid_current()")
            time.sleep(2)
            [live] = pipeline_status(cfg, exact_counts=False)
        finally:
            snapshot.close()
        assert live.load_rows == 50_000 and 4_000 < live.load_rows_per_s < 6_000
        assert live.load_progress.fraction is None   # nothing expected recorded: rows and pace only
        assert live.source_oldest_xact_s >= 2
        assert "the oldest transaction it holds on the source is" in render(cfg, [live])
        state.expect_rows(target_db, run_id, 200_000)
        [expecting] = pipeline_status(cfg, exact_counts=False)
        assert expecting.load_progress.fraction == 0.25 and 25 < expecting.load_progress.eta_s < 40
        assert "50,000 of 200,000 rows stored (25%)" in render(cfg, [expecting]) and "ETA" in render(cfg, [expecting])
        with target_db.cursor() as cur:   # the driver died: no sample for two minutes
            cur.execute("UPDATE tideline.load_progress SET at = at - interval '2 minutes' WHERE run_id = %s", (run_id,))
        [killed] = pipeline_status(cfg, exact_counts=False)
        assert killed.load_rows is None and killed.load_rows_per_s is None
    finally:
        with source_db.cursor() as cur:
            cur.execute(f"DROP TABLE public.{pipelines.name}")


def _user_token(user: str) -> str:
    _role, password = stackctl.AIRFLOW_USERS[user]
    return stackctl.http_json(f"{stackctl.airflow_url()}/auth/token", "POST",
                              {"username": user, "password": password})["access_token"]


def _status(method: str, url: str, token: str | None, body: dict | None = None) -> int:
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_each_airflow_role_reads_the_view_only_operators_trigger_and_metrics_scrape_with_a_token(demo):
    """A real user of each of Airflow's roles: all of them read the view and its API;
    triggering a sync (hence full_reload, repair, validate) is Airflow's DAG-run permission, which a
    viewer lacks and an operator has; /tideline/metrics takes the scrape token without a session."""
    base = stackctl.airflow_url()
    for user in ("viewer", "operator", stackctl.AIRFLOW_ADMIN):
        token = _user_token(user)
        assert _status("GET", f"{base}/tideline/api/pipelines?pipeline=demo", token) == 200, user
        assert _status("GET", f"{base}/tideline/", token) == 200, user
        assert _status("POST", f"{base}/tideline/api/pipelines", token, {}) == 405, user   # nothing to write
    run = {"logical_date": None, "conf": {"action": "validate"}}
    # a DAG that does not exist: the role check comes first (403), then the lookup (404) — no run starts
    assert _status("POST", f"{base}/api/v2/dags/sync_nothing_here/dagRuns", _user_token("viewer"), run) == 403
    assert _status("POST", f"{base}/api/v2/dags/sync_nothing_here/dagRuns", _user_token("operator"), run) == 404
    assert _status("PATCH", f"{base}/api/v2/dags/sync_demo", _user_token("viewer"), {"is_paused": True}) == 403
    scrape = stackctl.environment()["TIDELINE_METRICS_TOKEN"]
    assert _status("GET", f"{base}/tideline/metrics", scrape) == 200
    assert _status("GET", f"{base}/tideline/metrics", None) == 401
    assert _status("GET", f"{base}/tideline/metrics", scrape + "x") in (401, 403)
    assert _status("GET", f"{base}/tideline/api/pipelines", scrape) in (401, 403)   # the token opens metrics only


def test_status_while_kafka_does_not_answer_shows_the_rest_and_says_so(stack, pipelines, source_db, monkeypatch):
    """Found in the soak's 20-minute Kafka outage: status had nothing to show for the pipeline
    ("status unavailable"), just when a person looks. Now lag and headroom are unknown, the rest
    shows, and the KAFKA line says what does not answer."""
    from tideline import state
    from tideline.core.connections import get_connection
    from tideline.ops.status import pipeline_status, render
    monkeypatch.setenv("AIRFLOW_CONN_TIDELINE_KAFKA_AWAY", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:9"}}))
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{pipelines.name} (id bigint PRIMARY KEY)")
    try:
        cfg = pipelines.make([{"name": pipelines.name}], create_topics=False,
                             kafka={"conn_id": "tideline_kafka_away"})
        target = state.connect(get_connection(cfg.target.conn_id))
        try:
            state.migrate(target)
            epoch = state.claim_epoch(target, cfg.name, pipelines.name, "test", cfg.topic(pipelines.name))
            with target, target.cursor() as cur:   # a streaming table: its lag and headroom come from Kafka
                state.finish_full_load(cur, pipeline=cfg.name, table=pipelines.name, epoch=epoch,
                                       topic=cfg.topic(pipelines.name), offsets={0: 0}, snapshot_id="test",
                                       snapshot_at=None, snapshot_xmin="", rows=0)
        finally:
            target.close()
        [row] = pipeline_status(cfg, exact_counts=False)
        assert row.kafka_error.startswith("Kafka (tideline_kafka_away) does not answer")
        assert row.headroom == "unknown (Kafka away)" and row.phase == "streaming"
        text = render(cfg, [row])
        assert "KAFKA: Kafka (tideline_kafka_away) does not answer" in text and "       ?  unknown (Kafka away)" in text
    finally:
        with source_db.cursor() as cur:
            cur.execute(f"DROP TABLE public.{pipelines.name}")


def test_an_action_from_the_view_is_a_dag_run_of_the_user_who_asked_and_airflow_decides_who_may(demo, target_db):
    """The view's actions trigger sync_<p> through Airflow's REST API with the caller's own token:
    a viewer is refused by Airflow (no run starts), an operator's run carries their name, a note,
    and the conf the DAG's form would; an action the DAG would refuse is refused before Airflow."""
    base = f"{stackctl.airflow_url()}/tideline/api/pipelines/demo/tables/customers/actions"
    verifies = "SELECT count(*) FROM tideline.runs WHERE pipeline = 'demo' AND table_name = 'customers' AND kind = 'verify'"
    with target_db.cursor() as cur:
        cur.execute(verifies)
        verified_before = cur.fetchone()[0]
    before = {r["dag_run_id"] for r in demo["stack"].airflow_api("GET", "dags/sync_demo/dagRuns?limit=100")["dag_runs"]}

    def post(action: str, user: str):
        req = urllib.request.Request(f"{base}/{action}", method="POST", data=b"",
                                     headers={"Authorization": f"Bearer {_user_token(user)}"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    code, body = post("validate", "viewer")
    assert code == 403 and "Airflow refused to trigger sync_demo" in body["detail"], body
    code, body = post("drop_everything", "operator")
    assert code == 422 and "is not one of" in body["detail"] and "validate" in body["detail"], body
    code, body = post("batch_now", "operator")
    assert code == 422 and "not a batch-mode table" in body["detail"], body
    after = {r["dag_run_id"] for r in demo["stack"].airflow_api("GET", "dags/sync_demo/dagRuns?limit=100")["dag_runs"]}
    assert after == before   # nothing refused started a run

    code, body = post("validate", "operator")
    assert code == 200 and body["dag_id"] == "sync_demo" and not body["paused"], body
    run = demo["stack"].airflow_api("GET", f"dags/sync_demo/dagRuns/{urllib.parse.quote(body['dag_run_id'], safe='')}")
    assert run["conf"] == {"action": "validate", "tables": ["customers"], "resume_halted": False}
    assert run["triggering_user_name"] == "operator" and run["note"] == "triggered from the Tideline view"
    info, tis = wait_for_run(demo["stack"], "sync_demo", body["dag_run_id"])
    assert tis["validate"] in ("success", "failed"), tis   # it compared (the change left on Kafka may differ)
    with target_db.cursor() as cur:
        cur.execute(verifies)
        assert cur.fetchone()[0] == verified_before + 1
    [api] = get("api/pipelines?pipeline=demo", demo["token"])
    batch = next(t for t in api["tables"] if t["table"] == "audit_log")
    assert [a["action"] for a in batch["actions"]] == ["batch_now"]


def test_a_viewer_in_the_browser_sees_the_actions_refused_by_airflow_and_nothing_runs(demo, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    before = demo["stack"].airflow_api("GET", "dags/sync_demo/dagRuns?limit=100")["total_entries"]
    _role, password = stackctl.AIRFLOW_USERS["viewer"]
    driver = _signed_in_browser(tmp_path / "chromium", "viewer", password)
    try:
        row = driver.find_element(By.CSS_SELECTOR, "[data-pipeline=demo] tr[data-table=customers]")
        driver.execute_script("arguments[0].click()", row)
        wait = WebDriverWait(driver, 60)
        validate = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#actions button[data-action=validate]"))[0]
        driver.execute_script("arguments[0].click()", validate)
        result = wait.until(lambda d: "not done" in d.find_element(By.ID, "action-result").text
                            and d.find_element(By.ID, "action-result"))
        assert "Airflow refused to trigger sync_demo" in result.text and "problem" in result.get_attribute("class")
    finally:
        driver.quit()
    assert demo["stack"].airflow_api("GET", "dags/sync_demo/dagRuns?limit=100")["total_entries"] == before


def test_a_wait_whose_task_is_gone_is_not_shown_as_current(target_db, unique_name):
    """Found on a stack started again after a stop: status said "Stream waiting ... since 01:42
    (try 2)" five hours later, for a task that no longer ran. A task that waits writes its wait at
    every look (at most 2 minutes apart); one not written for 10 minutes is over."""
    from datetime import datetime, timedelta, timezone

    from tideline import state
    since = datetime.now(timezone.utc) - timedelta(hours=5)
    state.migrate(target_db)
    state.record_wait(target_db, unique_name, "the source (tideline_source)", since, 2, "refused", "sync_x.incremental")
    try:
        assert state.stream_wait(target_db, unique_name).tries == 2   # written just now: current
        with target_db, target_db.cursor() as cur:
            cur.execute("UPDATE tideline.stream_waits SET updated_at = now() - interval '11 minutes' "
                        "WHERE pipeline = %s", (unique_name,))
        assert state.stream_wait(target_db, unique_name) is None
    finally:
        with target_db, target_db.cursor() as cur:
            cur.execute("DELETE FROM tideline.stream_waits WHERE pipeline = %s", (unique_name,))
