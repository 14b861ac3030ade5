"""No log the stack kept during the whole test run prints a password: not the services' logs,
not the Airflow task logs (spark-submit's output inside them), not the secure stack's. The stack's
logins are words found nowhere else (services.base), so finding one is a leak. Runs last (marker
`last`): it reads what every other test made the stack write."""
from __future__ import annotations

from pathlib import Path

import pytest

import stackctl

pytestmark = [pytest.mark.integration, pytest.mark.last]


def _leaks(root: Path, secrets: dict[str, str]) -> list[str]:
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if not (path.suffix in (".log", ".json", ".txt", "") or ".log." in path.name):
            continue
        try:
            text = path.read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        for name, secret in secrets.items():
            at = text.find(secret)
            if at >= 0:
                line = text.count("\n", 0, at) + 1
                found.append(f"{path}:{line}: {name}")
    return found


def test_no_log_of_the_whole_run_prints_a_password(stack):
    secrets = {"the PostgreSQL password of Tideline's role": stackctl.PG_PASS,
               "the MariaDB password of Tideline's user": stackctl.MARIADB_PASS,
               "the Kafka SCRAM password (secure stack)": stackctl.KAFKA_PASS,
               "the object store's secret key": stackctl.S3_SECRET_KEY,
               "the REST catalog's OAuth2 client secret": stackctl.LAKE_CLIENT_SECRET}
    logs = [stackctl.LOGS, stackctl.VAR / "secure" / "log"]
    assert stackctl.LOGS.is_dir() and any(stackctl.LOGS.rglob("*.log")), "no logs to search: the stack never ran"
    leaks = [leak for root in logs if root.is_dir() for leak in _leaks(root, secrets)]
    assert not leaks, "passwords printed in logs:\n" + "\n".join(leaks[:50])
