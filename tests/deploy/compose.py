"""The container deployment as docs/deploy.md runs it, driven from outside: podman-compose on a
copy of docker/ with its own .env, the containers found by their compose labels, SQL run in the
database containers, commands in the Airflow ones, and Airflow's REST API on the published port.
Nothing here talks to a part by any way a user could not."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
FILES = ("-f", "docker-compose.yml", "-f", "trial-databases.yml")


def run(cmd: list[str], timeout: float = 600, check: bool = True, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


def wait_until(predicate, timeout: float, what: str, every: float = 5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:   # a part still starting: keep polling, report the last reason
            last = exc
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")


@dataclass
class Deployment:
    """One compose project made from a copy of docker/ (the checkout's own docker/.env untouched)."""
    workdir: Path
    project: str
    airflow_port: int = 8080

    @classmethod
    def prepare(cls, base: Path, project: str) -> "Deployment":
        """docs/deploy.md steps 2-3: copy .env.example to .env and fill in its secrets; the
        pipelines folder owned by the containers' user."""
        from cryptography.fernet import Fernet
        workdir = base / "docker"
        shutil.copytree(DOCKER, workdir, ignore=shutil.ignore_patterns("build-ca", "bin", "Dockerfile", ".env"))
        db_password = secrets.token_urlsafe(16)
        env = (workdir / ".env.example").read_text()
        env = env.replace("AIRFLOW_DB_PASSWORD=change-me", f"AIRFLOW_DB_PASSWORD={secrets.token_urlsafe(16)}")
        env = env.replace("change-me-too", db_password)
        env = env.replace("AIRFLOW_FERNET_KEY=\n", f"AIRFLOW_FERNET_KEY={Fernet.generate_key().decode()}\n")
        env = env.replace("AIRFLOW_JWT_SECRET=\n", f"AIRFLOW_JWT_SECRET={secrets.token_urlsafe(48)}\n")
        (workdir / ".env").write_text(env)
        os.chown(workdir / "pipelines", 50000, 0)
        return cls(workdir, project)

    @property
    def pipelines(self) -> Path:
        return self.workdir / "pipelines"

    # --- compose and containers
    def compose(self, *args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
        return run([sys.executable, "-m", "podman_compose", "-p", self.project, *FILES, *args],
                   timeout=timeout, check=check, cwd=self.workdir, env=self._env())

    def up(self) -> None:
        """docker/up.sh: each layer started once the one before reports healthy."""
        run(["bash", str(self.workdir / "up.sh"), "-p", self.project, *FILES], timeout=1200, env=self._env())

    def _env(self) -> dict:
        # podman-compose from this venv, as `podman-compose` on PATH for up.sh
        bin_dir = Path(sys.executable).parent
        return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def containers(self, key: str = "Names") -> dict[str, str]:
        """service -> container name (or key="Id": its id), of this project's containers, running or not."""
        out = run(["podman", "ps", "-a", "--filter", f"label=io.podman.compose.project={self.project}",
                   "--format", "json"]).stdout
        return {c["Labels"]["com.docker.compose.service"]: c["Names"][0] if key == "Names" else c[key]
                for c in json.loads(out or "[]")}

    def container(self, service: str) -> str:
        return self.containers()[service]

    def pid(self, service: str) -> int:
        return int(run(["podman", "inspect", "-f", "{{.State.Pid}}", self.container(service)]).stdout)

    def kill9(self, service: str) -> int:
        """kill -9 of the container's main process from the host, as a crash or the OOM killer
        would: the restart policy, not a person, brings it back."""
        pid = self.pid(service)
        os.kill(pid, 9)
        return pid

    def exec(self, service: str, *cmd: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        return run(["podman", "exec", self.container(service), *cmd], timeout=timeout, check=check)

    def tideline(self, *args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
        """The `tideline` command in the scheduler's container: the deployment's settings and connections."""
        return self.exec("airflow-scheduler", "tideline", *args, timeout=timeout, check=check)

    def sql(self, service: str, db: str, user: str, query: str) -> list[list[str]]:
        out = self.exec(service, "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At", "-F", "\t", "-U", user,
                        "-d", db, "-c", query).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def source(self, query: str) -> list[list[str]]:
        return self.sql("source", "app", "app", query)

    def warehouse(self, query: str) -> list[list[str]]:
        return self.sql("warehouse", "analytics", "warehouse", query)

    def in_airflow(self, code: str, timeout: float = 120) -> str:
        """Python in the scheduler's container (the deployment's network and installed libraries)."""
        return self.exec("airflow-scheduler", "python", "-c", code, timeout=timeout).stdout

    # --- Airflow's REST API on the published port
    def api(self) -> httpx.Client:
        password = json.loads(self.exec("airflow-api-server", "cat", "/opt/airflow/auth/passwords.json").stdout)["admin"]
        base = f"http://127.0.0.1:{self.airflow_port}"
        token = httpx.post(f"{base}/auth/token", json={"username": "admin", "password": password},
                           timeout=30).json()["access_token"]
        return httpx.Client(base_url=f"{base}/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def trigger(self, dag_id: str, conf: dict | None = None) -> str:
        with self.api() as api:
            wait_until(lambda: api.get(f"/dags/{dag_id}").status_code == 200, 300, f"Airflow to parse {dag_id}")
            api.patch(f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()
            made = api.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}})
            made.raise_for_status()
            return made.json()["dag_run_id"]

    def published_ports(self) -> dict[str, list[str]]:
        ports = {}
        for service, name in self.containers().items():
            out = run(["podman", "port", name], check=False).stdout.split()
            if out:
                ports[service] = out
        return ports

    def logs(self, service: str, lines: int = 60) -> str:
        out = run(["podman", "logs", "--tail", str(lines), self.container(service)], check=False)
        return out.stdout + out.stderr
