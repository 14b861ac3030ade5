"""The compose deployment (no Docker engine here to run it): every long-running service restarts
by itself and has a health check its dependants wait on; Connect ships Tideline's converter and
both Debezium plugins; Spark runs as a standalone cluster the jobs are submitted to, with the jars
the image build produces."""
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"


def services() -> dict:
    return yaml.safe_load((DOCKER / "docker-compose.yml").read_text())["services"]


AIRFLOW_PARTS = {"airflow-api-server": "api-server", "airflow-scheduler": "scheduler",
                 "airflow-dag-processor": "dag-processor", "airflow-triggerer": "triggerer"}


def test_every_service_restarts_by_itself_and_reports_its_health():
    svcs = services()
    assert set(svcs) >= {"kafka-1", "kafka-2", "kafka-3", "connect", "postgres", "spark-master",
                         "spark-worker-1", "spark-worker-2", "airflow-init", *AIRFLOW_PARTS}
    for name, svc in svcs.items():
        if name == "airflow-init":   # one-shot: migrates the metadata database and exits
            assert svc["restart"] == "no" and svc["command"] == ["db", "migrate"]
            continue
        assert svc.get("restart") == "unless-stopped", name
        assert svc.get("healthcheck", {}).get("test"), name
    for name in ("connect", "spark-worker-1", "spark-worker-2", *AIRFLOW_PARTS):
        deps = svcs[name]["depends_on"]
        assert all(dep.get("condition") == ("service_completed_successfully" if d == "airflow-init" else "service_healthy")
                   for d, dep in deps.items()), name


def test_connect_image_builds_the_text_converter_and_both_debezium_plugins():
    dockerfile = (DOCKER / "connect.Dockerfile").read_text()
    modules = re.search(r"-pl (\S+)", dockerfile).group(1).split(",")
    assert {"pg-text-converter", "slim-source", "debezium", "debezium-mariadb"} <= set(modules)


def test_jobs_run_on_the_spark_cluster_and_workers_cannot_see_the_checkout():
    svcs = services()
    env = svcs["airflow-scheduler"]["environment"]
    master = "spark://spark-master:7077"
    conn = json.loads(airflow_env_file()["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert conn["host"] == master and conn["extra"]["deploy-mode"] == "client"
    assert env["TIDELINE_SPARK_MASTER"] == master
    assert "--port 7077" in svcs["spark-master"]["command"][0]
    # LocalExecutor: tasks, so the drivers, run in the scheduler's container; workers reach it by name
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["TIDELINE_SPARK_DRIVER_HOST"] == svcs["airflow-scheduler"]["hostname"]
    assert env["TIDELINE_SPARK_DRIVER_BIND_ADDRESS"] == "0.0.0.0"
    for worker in ("spark-worker-1", "spark-worker-2"):
        cmd = svcs[worker]["command"][0]
        assert cmd.endswith(master) and "--cores 1" in cmd
        assert svcs[worker]["environment"]["PYTHONPATH"] == ""   # Tideline comes with each job


def test_the_spark_jars_tideline_reads_are_the_ones_the_image_build_produces():
    pom = ET.parse(ROOT / "stack" / "jvm" / "spark" / "pom.xml").getroot()
    parent = ET.parse(ROOT / "stack" / "jvm" / "pom.xml").getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    props = {p.tag.split("}")[1]: p.text for p in parent.find("m:properties", ns)}
    wanted = []
    for dep in pom.find("m:dependencies", ns):
        artifact = dep.find("m:artifactId", ns).text
        version = re.sub(r"\$\{([^}]+)\}", lambda m: props[m.group(1)], dep.find("m:version", ns).text)
        wanted.append(f"{artifact}-{version}.jar")
    dockerfile = (DOCKER / "airflow.Dockerfile").read_text()
    assert "-pl spark,iceberg" in dockerfile and "COPY --from=jars /lib/spark /opt/tideline/stack/lib/spark" in dockerfile
    jars = [Path(j) for j in services()["airflow-scheduler"]["environment"]["TIDELINE_SPARK_JARS"].split(",")]
    assert all(str(j.parent) == "/opt/tideline/stack/lib/spark" for j in jars)
    assert set(wanted) <= {j.name for j in jars}, (wanted, jars)


def test_the_iceberg_runtime_is_built_into_the_image_and_named_to_the_jobs():
    pom = (ROOT / "stack" / "jvm" / "iceberg" / "pom.xml").read_text()
    parent = (ROOT / "stack" / "jvm" / "pom.xml").read_text()
    artifact = re.search(r"<artifactId>(iceberg-spark-runtime[^<]+)</artifactId>", pom).group(1)
    version = re.search(r"<iceberg.version>([^<]+)</iceberg.version>", parent).group(1)
    assert "COPY --from=jars /lib/iceberg /opt/tideline/stack/lib/iceberg" in (DOCKER / "airflow.Dockerfile").read_text()
    env = services()["airflow-scheduler"]["environment"]
    assert env["TIDELINE_ICEBERG_JARS"] == f"/opt/tideline/stack/lib/iceberg/{artifact}-{version}.jar"
    # the file warehouse: the driver's container and every executor see the same files
    for name in ("airflow-scheduler", "spark-worker-1", "spark-worker-2"):
        assert "lake:/var/lib/tideline/lake" in services()[name]["volumes"], name


def airflow_env_file() -> dict[str, str]:
    return dict(line.split("=", 1) for line in (DOCKER / "airflow.env").read_text().splitlines()
                if line and not line.startswith("#"))


def test_airflow_runs_as_its_four_parts_sharing_one_config_logs_and_pipelines():
    svcs = services()
    first = svcs["airflow-api-server"]
    for name, command in AIRFLOW_PARTS.items():
        svc = svcs[name]
        assert svc["command"][0] == command, name
        assert svc["environment"] == first["environment"], name   # one JWT secret, one database, one config
        assert "../pipelines:/opt/tideline/pipelines:ro" in svc["volumes"]      # pipelines: not baked into the image
        assert "airflow-logs:/opt/airflow/logs" in svc["volumes"]             # the api-server serves what tasks wrote
        assert svc["env_file"][0] == "airflow.env" and svc["env_file"][1] == {"path": ".env", "required": False}
    env = first["environment"]
    assert env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"      # the scheduled DAGs run
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-api-server:8080/execution/"
    assert env["TIDELINE_PIPELINES"] == "/opt/tideline/pipelines"
    for secret in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__CORE__FERNET_KEY"):
        assert ":?" in env[secret], secret   # compose refuses to start without it, naming docker/.env
    assert "COPY pipelines" not in (DOCKER / "airflow.Dockerfile").read_text()


def test_every_airflow_setting_the_deployment_and_the_local_stack_make_is_one_airflow_knows():
    """A misspelt (or retired) AIRFLOW__SECTION__KEY is ignored by Airflow without a word: each is
    checked against Airflow's own configuration (section and option)."""
    from airflow.configuration import conf
    from services.env import environment
    known = conf.configuration_description   # Airflow's config.yml: every section and option it reads
    unknown = []
    for var in [*services()["airflow-api-server"]["environment"], *environment()]:
        if var.startswith("AIRFLOW__"):
            section, key = var[len("AIRFLOW__"):].lower().split("__", 1)
            if key not in known.get(section, {}).get("options", {}):
                unknown.append(var)
    assert unknown == []


def test_the_commands_are_airflows_own_and_the_example_connections_parse_as_tideline_reads_them():
    from airflow.cli.cli_parser import get_parser
    from tideline.core.connections import parse_connection
    parser = get_parser()
    for name, svc in services().items():
        if name.startswith("airflow-"):
            parser.parse_args(svc["command"])   # SystemExit on a command Airflow does not have
    lines = [line.lstrip("#") for line in (DOCKER / ".env.example").read_text().splitlines()]
    conns = dict(line.split("=", 1) for line in lines if line.startswith("AIRFLOW_CONN_"))
    conns.update((k, v) for k, v in airflow_env_file().items() if k.startswith("AIRFLOW_CONN_"))
    assert {"AIRFLOW_CONN_TIDELINE_SOURCE", "AIRFLOW_CONN_TIDELINE_TARGET", "AIRFLOW_CONN_TIDELINE_KAFKA",
            "AIRFLOW_CONN_TIDELINE_LAKE", "AIRFLOW_CONN_TIDELINE_MARIADB_SOURCE"} <= set(conns)
    for var, value in conns.items():
        conn = parse_connection(var[len("AIRFLOW_CONN_"):].lower(), value)
        if conn.conn_type in ("postgres", "mysql", "iceberg"):
            assert conn.tls["sslmode"] == "verify-full", var     # TLS, the server's name checked
        if conn.conn_type == "kafka" and "sasl.username" in conn.extra:
            assert conn.kafka_access.bootstrap and conn.extra["security.protocol"] == "SASL_SSL"


def test_the_compose_file_is_valid_compose_and_everything_it_names_exists():
    """What `docker compose config` would check, without a Docker engine: the file against the
    Compose specification (compose-spec: unknown keys, wrong values, bad conditions refused), after
    YAML's merge keys are resolved as Compose resolves them; then what the spec cannot see — every
    service a dependency names, every named volume a service mounts, every file and folder it
    takes from the checkout."""
    from compose_spec import PyCompose
    data = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    parsed = PyCompose.from_json(json.dumps(data))
    assert sorted(parsed.service_names()) == sorted(data["services"])
    volumes = set(data["volumes"])
    for name, svc in data["services"].items():
        for dep in svc.get("depends_on", {}):
            assert dep in data["services"], (name, dep)
        for mount in svc.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith((".", "/")):
                assert (DOCKER / source).exists() or source.startswith("/"), (name, source)
            else:
                assert source in volumes, (name, source)
        for env_file in svc.get("env_file", []):
            path = env_file if isinstance(env_file, str) else env_file["path"]
            required = isinstance(env_file, str) or env_file.get("required", True)
            assert not required or (DOCKER / path).is_file(), (name, path)
        build = svc.get("build")
        if build:
            dockerfile = ROOT / build["dockerfile"]
            assert dockerfile.is_file(), (name, dockerfile)
            for line in dockerfile.read_text().splitlines():   # COPY sources from the checkout
                if line.startswith("COPY ") and "--from=" not in line:
                    for source in line.split()[1:-1]:
                        assert (ROOT / source).exists(), (dockerfile.name, source)
    bad = json.loads(json.dumps(data))
    bad["services"]["connect"]["restart"] = "sometimes"
    with pytest.raises(ValueError, match="unknown variant `sometimes`"):
        PyCompose.from_json(json.dumps(bad))
