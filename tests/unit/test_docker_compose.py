"""The compose deployment (no Docker engine here to run it): every long-running service restarts
by itself and has a health check its dependants wait on; Connect ships Tideline's converter and
both Debezium plugins; Spark runs as a standalone cluster the jobs are submitted to, with the jars
the image build produces."""
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"


def services() -> dict:
    return yaml.safe_load((DOCKER / "docker-compose.yml").read_text())["services"]


def test_every_service_restarts_by_itself_and_reports_its_health():
    svcs = services()
    assert set(svcs) >= {"kafka-1", "kafka-2", "kafka-3", "connect", "postgres", "airflow", "spark-master",
                         "spark-worker-1", "spark-worker-2"}
    for name, svc in svcs.items():
        assert svc.get("restart") == "unless-stopped", name
        assert svc.get("healthcheck", {}).get("test"), name
    for name in ("connect", "airflow", "spark-worker-1", "spark-worker-2"):
        assert all(dep.get("condition") == "service_healthy" for dep in svcs[name]["depends_on"].values()), name


def test_connect_image_builds_the_text_converter_and_both_debezium_plugins():
    dockerfile = (DOCKER / "connect.Dockerfile").read_text()
    modules = re.search(r"-pl (\S+)", dockerfile).group(1).split(",")
    assert {"pg-text-converter", "slim-source", "debezium", "debezium-mariadb"} <= set(modules)


def test_jobs_run_on_the_spark_cluster_and_workers_cannot_see_the_checkout():
    svcs = services()
    env = svcs["airflow"]["environment"]
    master = "spark://spark-master:7077"
    conn = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert conn["host"] == master and conn["extra"]["deploy-mode"] == "client"
    assert env["TIDELINE_SPARK_MASTER"] == master
    assert "--port 7077" in svcs["spark-master"]["command"][0]
    # the workers reach the driver in the Airflow container by its hostname
    assert env["TIDELINE_SPARK_DRIVER_HOST"] == svcs["airflow"]["hostname"]
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
    assert "-pl spark" in dockerfile and "COPY --from=jars /lib/spark /opt/tideline/stack/lib/spark" in dockerfile
    jars = [Path(j) for j in services()["airflow"]["environment"]["TIDELINE_SPARK_JARS"].split(",")]
    assert all(str(j.parent) == "/opt/tideline/stack/lib/spark" for j in jars)
    assert set(wanted) <= {j.name for j in jars}, (wanted, jars)
