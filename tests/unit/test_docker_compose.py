"""The compose deployment (no Docker engine here to run it): every long-running service restarts
by itself and has a health check its dependants wait on; Connect ships Tideline's converter."""
from pathlib import Path

import yaml

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def test_every_service_restarts_by_itself_and_reports_its_health():
    services = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())["services"]
    assert set(services) >= {"kafka-1", "kafka-2", "kafka-3", "connect", "postgres", "airflow"}
    for name, svc in services.items():
        assert svc.get("restart") == "unless-stopped", name
        assert svc.get("healthcheck", {}).get("test"), name
    for name in ("connect", "airflow"):
        assert all(dep.get("condition") == "service_healthy" for dep in services[name]["depends_on"].values()), name


def test_connect_image_builds_the_text_converter_into_the_debezium_plugin():
    dockerfile = (DOCKER / "connect.Dockerfile").read_text()
    assert "pg-text-converter" in dockerfile
