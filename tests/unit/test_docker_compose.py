"""The compose deployment's files, read without running them (tests/deploy builds and runs them):
every long-running service restarts by itself and has a health check; every image is built from
the one pinned Debian base and runs as a non-root user; only Airflow's port is published; Kafka's
logs are on the volumes; the jars Tideline names are the ones the image build produces."""
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
DOCKERFILE = (DOCKER / "Dockerfile").read_text()


def services() -> dict:
    return yaml.safe_load((DOCKER / "docker-compose.yml").read_text())["services"]


AIRFLOW_PARTS = {"airflow-api-server": "api-server", "airflow-scheduler": "scheduler",
                 "airflow-dag-processor": "dag-processor", "airflow-triggerer": "triggerer"}


def stages() -> dict[str, list[str]]:
    """Dockerfile stage name -> its lines."""
    out, name = {}, None
    for line in DOCKERFILE.splitlines():
        m = re.match(r"FROM (\S+) AS (\S+)", line)
        if m:
            name = m.group(2)
            out[name] = [line]
        elif name:
            out[name].append(line)
    return out


def test_every_service_restarts_by_itself_and_reports_its_health():
    svcs = services()
    assert set(svcs) >= {"kafka-1", "kafka-2", "kafka-3", "connect", "postgres", "airflow-init", *AIRFLOW_PARTS}
    for name, svc in svcs.items():
        if name == "airflow-init":   # one-shot: migrates the metadata database and exits
            assert svc["restart"] == "no" and svc["command"] == ["db", "migrate"]
            continue
        if "cli" in svc.get("profiles", []):   # `podman-compose run --rm tideline ...`
            continue
        assert svc.get("restart") == "unless-stopped", name
        assert svc.get("healthcheck", {}).get("test"), name
    for name in ("connect", *AIRFLOW_PARTS):
        deps = svcs[name]["depends_on"]
        assert all(dep.get("condition") == ("service_completed_successfully" if d == "airflow-init" else "service_healthy")
                   for d, dep in deps.items()), name


def test_every_image_is_built_from_the_one_debian_base_and_runs_as_a_non_root_user():
    assert re.search(r"^ARG BASE=localhost/tideline-base:bookworm$", DOCKERFILE, re.M)
    found = stages()
    for name, lines in found.items():
        base = lines[0].split()[1]
        assert base == "${BASE}" or base in list(found)[:list(found).index(name)], (name, base)   # no registry image
    for target in ("kafka", "airflow", "postgres"):
        users = [line.split()[1] for line in found[target] if line.startswith("USER ")]
        assert users and users[-1] not in ("root", "0"), target
    images = {svc["image"].split(":")[0] for svc in services().values()}
    assert images == {"localhost/tideline-kafka", "localhost/tideline-airflow", "localhost/tideline-postgres"}
    # only runtime requirements in the image: the test and docs tools stay in requirements-dev.txt
    assert "pip install -q --no-cache-dir -r /opt/tideline/requirements.txt" in DOCKERFILE
    runtime = (ROOT / "requirements.txt").read_text()
    assert not re.search(r"^(pytest|selenium|mkdocs|hypothesis)==", runtime, re.M)


def test_only_airflow_publishes_a_port_and_kafka_keeps_its_logs_on_the_volumes():
    svcs = services()
    assert {name for name, svc in svcs.items() if svc.get("ports")} == {"airflow-api-server"}
    broker = (DOCKER / "bin" / "kafka-broker").read_text()
    assert "data=/var/lib/kafka/data" in broker and "log.dirs=${data}" in broker
    for n in (1, 2, 3):
        assert svcs[f"kafka-{n}"]["volumes"] == [f"kafka-{n}:/var/lib/kafka/data"]
    env = svcs["airflow-scheduler"]["environment"]
    assert env["TIDELINE_KAFKA_DURABILITY"] == "production"


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
    assert "COPY --from=jars /build/lib/spark /opt/tideline/jars/spark" in DOCKERFILE
    jars = [Path(j) for j in services()["airflow-scheduler"]["environment"]["TIDELINE_SPARK_JARS"].split(",")]
    assert all(str(j.parent) == "/opt/tideline/jars/spark" for j in jars)
    assert set(wanted) <= {j.name for j in jars}, (wanted, jars)


def test_the_iceberg_runtime_is_built_into_the_image_and_named_to_the_jobs():
    pom = (ROOT / "stack" / "jvm" / "iceberg" / "pom.xml").read_text()
    parent = (ROOT / "stack" / "jvm" / "pom.xml").read_text()
    artifact = re.search(r"<artifactId>(iceberg-spark-runtime[^<]+)</artifactId>", pom).group(1)
    version = re.search(r"<iceberg.version>([^<]+)</iceberg.version>", parent).group(1)
    assert "COPY --from=jars /build/lib/iceberg /opt/tideline/jars/iceberg" in DOCKERFILE
    env = services()["airflow-scheduler"]["environment"]
    assert env["TIDELINE_ICEBERG_JARS"] == f"/opt/tideline/jars/iceberg/{artifact}-{version}.jar"
    assert "lake:/var/lib/tideline/lake" in services()["airflow-scheduler"]["volumes"]


def interpolated(text: str) -> str:
    """Compose's variable interpolation with nothing set: ${X:-default} is the default, ${X:?error}
    (a value docker/.env must give) a placeholder."""
    text = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text)
    return re.sub(r"\$\{[A-Z_]+:\?[^}]*\}", "set-in-env", text)


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
        # the deployment's own pipelines folder, writable (decommission retires a YAML): not the demo's
        assert "${TIDELINE_PIPELINES_DIR:-./pipelines}:/opt/tideline/pipelines" in svc["volumes"]
        assert "airflow-logs:/opt/airflow/logs" in svc["volumes"]             # the api-server serves what tasks wrote
        assert svc["env_file"][0] == "airflow.env" and svc["env_file"][1] == {"path": ".env", "required": False}
    env = first["environment"]
    assert env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"      # the scheduled DAGs run
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-api-server:8080/execution/"
    assert "TIDELINE_PIPELINES=/opt/tideline/pipelines" in DOCKERFILE
    for secret in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__CORE__FERNET_KEY"):
        assert ":?" in env[secret], secret   # compose refuses to start without it, naming docker/.env
    assert "COPY pipelines" not in DOCKERFILE and not any(
        p.suffix == ".yaml" for p in (DOCKER / "pipelines").iterdir())


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
    trial = dict(line.split("=", 1) for line in (DOCKER / ".env.example").read_text().splitlines()
                 if line.startswith("AIRFLOW_CONN_"))   # the trial databases' (trial-databases.yml)
    trial_hosts = set(yaml.safe_load((DOCKER / "trial-databases.yml").read_text())["services"])
    for var, value in trial.items():
        assert parse_connection(var[len("AIRFLOW_CONN_"):].lower(), value).host in trial_hosts, var
    conns.update((k, v) for k, v in airflow_env_file().items() if k.startswith("AIRFLOW_CONN_"))
    assert {"AIRFLOW_CONN_TIDELINE_SOURCE", "AIRFLOW_CONN_TIDELINE_TARGET", "AIRFLOW_CONN_TIDELINE_KAFKA",
            "AIRFLOW_CONN_TIDELINE_LAKE", "AIRFLOW_CONN_TIDELINE_MARIADB_SOURCE"} <= set(conns)
    commented = {line.split("=", 1)[0] for line in (DOCKER / ".env.example").read_text().splitlines()
                 if line.startswith("#AIRFLOW_CONN_")}
    for var, value in conns.items():
        conn = parse_connection(var[len("AIRFLOW_CONN_"):].lower(), value)
        if conn.conn_type in ("postgres", "mysql", "iceberg") and f"#{var}" in commented:   # the examples for your own
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
    data = yaml.safe_load(interpolated((DOCKER / "docker-compose.yml").read_text()))
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
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    for line in DOCKERFILE.splitlines():   # COPY sources from the checkout, and let through .dockerignore
        if line.startswith("COPY ") and "--from=" not in line:
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source
                assert any(source.rstrip("/") == rule[1:] or source.startswith(rule[1:] + "/")
                           for rule in ignored if rule.startswith("!")), source
    bad = json.loads(json.dumps(data))
    bad["services"]["connect"]["restart"] = "sometimes"
    with pytest.raises(ValueError, match="unknown variant `sometimes`"):
        PyCompose.from_json(json.dumps(bad))
