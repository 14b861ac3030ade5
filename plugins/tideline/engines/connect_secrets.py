"""The connector's credentials, kept out of Kafka Connect's config.

A connector config is stored in Connect's config topic and returned by `GET
/connectors/<name>/config` to anyone who reaches Connect's REST port, so it holds only a reference,
`${directory:<dir>/<connector>:database.password}`, resolved by the worker's
DirectoryConfigProvider from a file the sync DAG writes (mode 0600, in a 0700 folder) from the
Airflow connection each time it ensures the connector. A password rotated in the Airflow
connection therefore reaches Connect on the next run: the file changes and the connector restarts.

The folder is TIDELINE_CONNECT_SECRETS_DIR, which the Airflow worker writes and the Connect worker
reads (the same folder on one host, a shared volume otherwise; the stack sets both up). Without it
the password stays inline, with a warning in the log.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("tideline.connector")

SECRETS_DIR_ENV = "TIDELINE_CONNECT_SECRETS_DIR"
PROVIDER = "directory"
PROVIDER_CLASS = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
# the database password, the SASL login of a MariaDB connector's schema-history Kafka clients, and
# the password of its TLS truststore (engines.mariadb_tls, which keeps the truststore beside them)
SECRET_KEYS = ("database.password", "schema.history.internal.producer.sasl.jaas.config",
               "schema.history.internal.consumer.sasl.jaas.config", "database.ssl.truststore.password")


def secrets_dir() -> Path | None:
    where = os.environ.get(SECRETS_DIR_ENV, "")
    return Path(where) if where else None


def worker_properties(folder: Path) -> str:
    """The lines a Connect worker needs to resolve the references (only inside `folder`)."""
    return (f"config.providers={PROVIDER}\n"
            f"config.providers.{PROVIDER}.class={PROVIDER_CLASS}\n"
            f"config.providers.{PROVIDER}.param.allowed.paths={folder}\n")


def externalize(connector: str, config: dict[str, str]) -> tuple[dict[str, str], bool]:
    """The config with each secret replaced by its reference, the secrets written to their files;
    and whether a file's content changed (a rotated password: the running connector must restart
    to read it). Without a secrets folder: the config as it is."""
    folder = secrets_dir()
    present = [k for k in SECRET_KEYS if config.get(k)]
    if not present:
        return config, False
    if folder is None:
        log.warning("connector %s: its password is stored in Kafka Connect's config in clear, because %s is not "
                    "set; set it to a folder this worker writes and Connect reads (with a %s config provider "
                    "on the Connect worker)", connector, SECRETS_DIR_ENV, PROVIDER_CLASS)
        return config, False
    own = folder / connector
    own.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(own, 0o700)
    out, changed = dict(config), False
    for key in present:
        changed |= _write(own / key, config[key])
        out[key] = f"${{{PROVIDER}:{own}:{key}}}"
    return out, changed


def _write(path: Path, value: str) -> bool:
    """Writes the value (mode 0600 from the start, replaced atomically); True when it changed."""
    data = value.encode()
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return True


def remove(connector: str) -> None:
    """The connector's secret files, when the connector is removed for good."""
    folder = secrets_dir()
    if folder is None:
        return
    own = folder / connector
    for path in (own.iterdir() if own.is_dir() else ()):   # its secrets and its truststore
        path.unlink(missing_ok=True)
    try:
        own.rmdir()
    except OSError:
        pass
