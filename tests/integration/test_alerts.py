"""A repeating alert counts as sent only once the webhook took it: a failed delivery must not
silence the condition for alerts.repeat_after_hours."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg2
import pytest

import stackctl
from tideline import state
from tideline import alerts

pytestmark = pytest.mark.integration


def test_an_undelivered_alert_is_tried_again_at_the_next_check(stack, pipelines, monkeypatch):
    answers, received = [503, 200, 200], []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            code = answers.pop(0)
            if code == 200:
                received.append(body["text"])
            self.send_response(code)
            self.end_headers()

        def log_message(self, *_args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AIRFLOW_CONN_TIDELINE_FLAKY_HOOK", json.dumps({
        "conn_type": "http", "host": "127.0.0.1", "port": server.server_address[1], "schema": "http"}))
    cfg = pipelines.make([{"name": "orders"}], create_topics=False, alerts={"webhook_conn_id": "tideline_flaky_hook"})
    conn = psycopg2.connect(stackctl.pg_url(stackctl.DATABASES["target"]))
    try:
        state.migrate(conn)
        send = alerts.once_per(conn, cfg, lambda event, message: alerts.notify(cfg, event, message))
        send(alerts.HEADROOM_LOW, "orders: 1h of headroom", subject="orders")   # webhook answers 503
        assert received == []
        send(alerts.HEADROOM_LOW, "orders: 1h of headroom", subject="orders")   # tried again, delivered
        assert received == [f"Tideline {cfg.name}: orders: 1h of headroom"]
        send(alerts.HEADROOM_LOW, "orders: 1h of headroom", subject="orders")   # now quiet for the window
        assert len(received) == 1 and answers == [200]
    finally:
        conn.close()
        server.shutdown()
