"""Alerts: what a person must hear about, said in the task log always and, when the pipeline names
a webhook connection, posted to a chat webhook as {"text": ...} (the format Slack, Mattermost,
Rocket.Chat and Google Chat incoming webhooks all accept).

A webhook that cannot be reached is reported as an error in the log next to the alert itself;
it never hides the alert or fails the work that raised it.
"""
from __future__ import annotations

import logging
from typing import Callable

import requests

from tideline.core.capture_hold import HOLDER_EXPIRING, HOLDER_IDLE, HOLDER_LOST, RETAINED_HIGH
from tideline.core.config import PipelineConfig
from tideline.core.connections import Conn, get_connection

log = logging.getLogger("tideline.alerts")

PIPELINE_FAILED = "pipeline_failed"
RESNAPSHOT_STARTED = "resnapshot_started"
RESNAPSHOT_FINISHED = "resnapshot_finished"
VERIFY_DIFFERENCES = "verify_differences"
HEADROOM_LOW = "headroom_low"
TABLE_HALTED = "table_halted"
STREAM_STALLED = "stream_stalled"
TABLE_REFUSED = "table_refused"
CAPTURE_FAILED = "capture_failed"
TARGET_MISSING = "target_missing"   # the state says a table holds a load; the target lacks it, or it is empty
# what capture holds on the source (core.capture_hold judges them)
SOURCE_LOG_RETAINED, SOURCE_LOG_UNREAD, SOURCE_LOG_LOST = RETAINED_HIGH, HOLDER_IDLE, HOLDER_LOST
SOURCE_LOG_EXPIRING = HOLDER_EXPIRING
_LEVEL = {PIPELINE_FAILED: logging.ERROR, TARGET_MISSING: logging.ERROR, TABLE_HALTED: logging.ERROR, TABLE_REFUSED: logging.ERROR,
          CAPTURE_FAILED: logging.ERROR, STREAM_STALLED: logging.ERROR, VERIFY_DIFFERENCES: logging.ERROR, HEADROOM_LOW: logging.WARNING,
          RESNAPSHOT_STARTED: logging.WARNING, RESNAPSHOT_FINISHED: logging.INFO, SOURCE_LOG_RETAINED: logging.ERROR,
          SOURCE_LOG_UNREAD: logging.ERROR, SOURCE_LOG_LOST: logging.ERROR, SOURCE_LOG_EXPIRING: logging.WARNING}


def webhook_url(conn: Conn) -> str:
    """An Airflow HTTP connection as a URL: extra.webhook_url, or a host that is a whole URL
    (Airflow's HttpHook accepts both), or scheme (schema field) + host + port + extra.endpoint."""
    if conn.extra.get("webhook_url"):
        return conn.extra["webhook_url"]
    endpoint = str(conn.extra.get("endpoint", "")).lstrip("/")
    if conn.host and "://" in conn.host:
        base = conn.host.rstrip("/") + (f":{conn.port}" if conn.port else "")
    else:
        base = conn.http_base_url()
    return f"{base}/{endpoint}" if endpoint else base


def notify(cfg: PipelineConfig, event: str, message: str, resolve: Callable[[str], Conn] | None = None) -> bool:
    """Says it in the log; posts it to the pipeline's webhook if it has one. Returns whether it
    reached everyone it should (False: the webhook did not take it; the log says why)."""
    text = f"Tideline {cfg.name}: {message}"
    log.log(_LEVEL.get(event, logging.WARNING), "ALERT [%s] %s", event, text)
    conn_id = cfg.alerts.webhook_conn_id
    if not conn_id:
        return True
    try:
        url = webhook_url((resolve or get_connection)(conn_id))
        resp = requests.post(url, json={"text": text}, timeout=10)
        if resp.status_code >= 300:
            log.error("ALERT [%s] not delivered: webhook connection %s answered %d: %s", event, conn_id,
                      resp.status_code, resp.text[:300])
            return False
    except Exception as exc:  # the alert is in the log above; say why the webhook did not get it
        log.error("ALERT [%s] not delivered to webhook connection %s: %s", event, conn_id, exc)
        return False
    return True


def once_per(conn, cfg: PipelineConfig, notify: Callable[[str, str], bool]) -> Callable[..., None]:
    """notify(event, message, subject=...) that repeats a (event, subject) alert at most once per
    alerts.repeat_after_hours — for checks that run on a schedule and see the same condition again.
    The log line is written every time; only the webhook is spared. An alert counts as sent only
    once it was delivered: a failed delivery is tried again at the next check, not hours later."""
    quiet_s = cfg.alerts.repeat_after_hours * 3600

    def send(event: str, message: str, subject: str = "") -> None:
        from tideline.state import ledger
        if ledger.alert_due(conn, cfg.name, event, subject, quiet_s):
            if notify(event, message) is False:
                return
            ledger.alert_sent(conn, cfg.name, event, subject, message)
        else:
            log.log(_LEVEL.get(event, logging.WARNING), "ALERT [%s] (already sent within %gh, not repeated) "
                    "Tideline %s: %s", event, cfg.alerts.repeat_after_hours, cfg.name, message)
    return send
