"""The FastAPI app Airflow's api-server mounts at /tideline: the page, its JSON API and the
metrics. Everything but the static files sits behind Airflow's own login (Airflow does not guard
a plugin's app by itself): the JWT in the Authorization header or in Airflow's session cookie,
checked by Airflow's `get_user`. The page redirects a browser without a session to Airflow's login.
/tideline/metrics also takes `Authorization: Bearer $TIDELINE_METRICS_TOKEN` when that variable is
set, so Prometheus can scrape without an expiring Airflow token."""
from __future__ import annotations

import hmac
import os
from pathlib import Path

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from tideline.view import actions, history, metrics, overview

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
CHART_JS = HERE / "node_modules" / "chart.js" / "dist" / "chart.umd.min.js"   # npm, at `make setup`


def _pipelines_dir() -> Path:
    from tideline.airflow.pipelines import pipelines_dir
    return pipelines_dir()


def _connection(conn_id: str):
    """Airflow's own connection lookup (secrets backends, environment, metadata database)."""
    from tideline.airflow.connections import from_airflow
    return from_airflow(conn_id)


async def _user(request: Request):
    from airflow.api_fastapi.core_api.security import get_user, bearer_scheme
    return await get_user(request, None, await bearer_scheme(request))


async def _page_user(request: Request):
    """The signed-in user, or a redirect to Airflow's login that comes back here."""
    try:
        return await _user(request)
    except HTTPException as exc:
        if exc.status_code not in (401, 403):
            raise
        from airflow.api_fastapi.app import get_auth_manager
        raise _Redirect(get_auth_manager().get_url_login(next_url=str(request.url))) from None


async def _metrics_user(request: Request):
    token = os.environ.get("TIDELINE_METRICS_TOKEN")
    given = request.headers.get("authorization", "")
    if token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return None
    return await _user(request)


def _table_pipeline(pipeline: str, table: str):
    """The pipeline's config, for a table it has (404 and 409 that say what is wrong)."""
    from tideline.core.config import load_pipeline
    from tideline.core.errors import TidelineError
    from tideline.core.names import PIPELINE_NAME
    path = _pipelines_dir() / f"{pipeline}.yaml"
    if not PIPELINE_NAME.match(pipeline) or not path.is_file():
        raise HTTPException(404, f"no pipeline {pipeline!r} in {path.parent}")
    try:
        cfg = load_pipeline(path)
    except TidelineError as exc:   # the file is there but invalid: say what is wrong with it
        raise HTTPException(409, str(exc)) from None
    if table not in {t.name for t in cfg.tables}:
        raise HTTPException(404, f"pipeline {pipeline!r} has no table {table!r}")
    return cfg


def _caller_token(request: Request) -> str:
    """The caller's own Airflow token: the bearer it sent, else the UI's session cookie."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    given = request.headers.get("authorization", "")
    return given[7:] if given.lower().startswith("bearer ") else request.cookies.get(COOKIE_NAME_JWT_TOKEN, "")


def _airflow_url(request: Request) -> str:
    """Where this api-server answers its own REST API: [api] base_url when set (behind a proxy),
    else the address the request came in at."""
    from airflow.configuration import conf
    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    return base or f"{request.url.scheme}://{request.url.netloc}"


class _Redirect(Exception):
    def __init__(self, url: str):
        self.url = url


def create_app() -> FastAPI:
    app = FastAPI(title="Tideline", description="Tideline's pipelines in the Airflow UI", docs_url=None,
                  redoc_url=None)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.exception_handler(_Redirect)
    async def redirect(_request: Request, exc: _Redirect):
        return RedirectResponse(exc.url, status_code=302)

    @app.get("/", include_in_schema=False, dependencies=[Depends(_page_user)])
    def page():
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    @app.get("/vendor/chart.umd.min.js", include_in_schema=False)
    def chart_js():
        if not CHART_JS.is_file():
            raise HTTPException(404, f"Chart.js is not installed at {CHART_JS}: run `make setup` (npm ci)")
        return FileResponse(CHART_JS, media_type="text/javascript")

    @app.get("/api/pipelines", dependencies=[Depends(_user)])
    def pipelines(pipeline: str | None = None, timeout_s: float = Query(8.0, gt=0, le=60)):
        """Every pipeline and table: the figures `make status` shows, as numbers."""
        return [p.as_json() for p in overview.overview(_pipelines_dir(), _connection, timeout_s, only=pipeline)]

    @app.get("/api/pipelines/{pipeline}/tables/{table}/history", dependencies=[Depends(_user)])
    def table_history(pipeline: str, table: str, window: str = "1h"):
        """One table's stream figures in time buckets, its runs, and its loads' progress."""
        cfg = _table_pipeline(pipeline, table)
        try:
            history.window(window)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        try:
            return history.table_history(cfg, _connection, table, window)
        except Exception as exc:   # the target is down or refuses: say so, for this table only
            return JSONResponse(status_code=503, content={
                "detail": f"the target of pipeline {pipeline} ({cfg.target.conn_id}) did not answer: "
                          f"{type(exc).__name__}: {(str(exc).strip() or '-').splitlines()[0]}"})

    @app.post("/api/pipelines/{pipeline}/tables/{table}/actions/{action}", dependencies=[Depends(_user)])
    async def table_action(pipeline: str, table: str, action: str, request: Request):
        """Does an action the view offers (view.actions): triggers the pipeline's DAG through
        Airflow's REST API as the caller, so Airflow checks their right to and logs it."""
        from tideline.core.params import ParamError
        cfg = _table_pipeline(pipeline, table)
        given = await request.json() if await request.body() else {}
        if not isinstance(given, dict):
            raise HTTPException(422, f"the body must be a JSON object of the action's params, got {given!r}")
        try:
            dag_id, conf = actions.trigger_request(cfg, table, action, given)
        except ParamError as exc:
            raise HTTPException(422, str(exc)) from None
        return await actions.trigger(_airflow_url(request), _caller_token(request), dag_id, conf)

    @app.get("/metrics", dependencies=[Depends(_metrics_user)])
    def prometheus_metrics():
        body = metrics.render(overview.overview(_pipelines_dir(), _connection))
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    return app
