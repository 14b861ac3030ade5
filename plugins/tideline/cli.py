"""`tideline`: the command line of an installed Tideline (and `python -m tideline` from a checkout).

Built on click (pinned with Airflow). Every command reads the pipelines folder Airflow's DAGs are
built from (`--pipelines-dir`, else TIDELINE_PIPELINES, else the checkout's pipelines/) and
finds connections as Airflow's own processes do (commands.for_commands). `--json` prints what a
script or a monitor reads instead of lines for a person. Exit status: 0 fine, 1 something is
wrong (an invalid file, a failed check, a table that differs), 2 the command could not run.

What changes a running pipeline (pause, resume, remove) is not done behind the scheduler's back:
it triggers the pipeline's sync DAG with the params a person would type in Airflow's form,
through Airflow's REST API (`--airflow-url`, user and password from TIDELINE_AIRFLOW_USER /
TIDELINE_AIRFLOW_PASSWORD), and the DAG checks them as it checks the form's.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import asdict
from pathlib import Path

import click

from tideline import __version__
from tideline.core.errors import TidelineError


def _emit(as_json: bool, data, lines) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        for line in lines:
            click.echo(line)


def _folder(pipelines_dir: str | None) -> Path:
    from tideline.entrypoints import pipelines_dir as default
    return default(pipelines_dir)


def _pipeline(folder: Path, name: str):
    from tideline.core.config import load_pipeline
    path = folder / f"{name}.yaml"
    if not path.exists():
        raise click.UsageError(f"no pipeline {name!r} in {folder} (its file would be {path.name})")
    return load_pipeline(path)


def _connections() -> None:
    from tideline.commands import for_commands
    for_commands()


PIPELINES_DIR = click.option("--pipelines-dir", envvar="TIDELINE_PIPELINES", default=None,
                             help="the folder of pipeline YAMLs (default: TIDELINE_PIPELINES, else the checkout's)")
AS_JSON = click.option("--json", "as_json", is_flag=True, help="print JSON instead of lines")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="tideline", message="%(prog)s %(version)s")
def main() -> None:
    """Tideline: full load, then change stream, exactly once — its pipelines from the command line."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")


@main.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@PIPELINES_DIR
@AS_JSON
def validate(files, pipelines_dir, as_json) -> None:
    """Check pipeline YAMLs offline: file, line and field of each problem."""
    from tideline.core.config import load_pipeline
    from tideline.core.errors import ConfigError
    out = []
    for path in files or sorted(_folder(pipelines_dir).glob("*.yaml")):
        try:
            cfg = load_pipeline(path)
            out.append({"file": str(path), "valid": True, "pipeline": cfg.name, "tables": len(cfg.tables),
                        "source": cfg.source.kind, "target": cfg.target.kind, "problems": []})
        except ConfigError as exc:
            out.append({"file": str(path), "valid": False, "message": str(exc),
                        "problems": [{"field": f, "message": m} for f, m in exc.problems]})
    _emit(as_json, out, [f"ok      {o['file']}: pipeline {o['pipeline']}, {o['tables']} table(s), {o['source']} -> "
                         f"{o['target']}" if o["valid"] else f"INVALID {o['message']}" for o in out])
    sys.exit(0 if all(o["valid"] for o in out) else 1)


@main.command()
@click.option("--pipeline", help="one pipeline (default: all)")
@click.option("--timeout", "timeout_s", type=float, default=8.0, show_default=True,
              help="seconds a pipeline's figures may take (a target that hangs shows as such)")
@PIPELINES_DIR
@AS_JSON
def status(pipeline, timeout_s, pipelines_dir, as_json) -> None:
    """Where every pipeline's tables stand: phase, rows, lag, headroom, errors."""
    _connections()
    folder = _folder(pipelines_dir)
    if not as_json:
        from tideline.ops.status import main as status_lines
        args = ["--pipeline", pipeline] if pipeline else []
        os.environ["TIDELINE_PIPELINES"] = str(folder)
        sys.exit(status_lines(args))
    from tideline.core.connections import get_connection
    from tideline.view.overview import overview
    found = overview(folder, get_connection, timeout_s, only=pipeline)
    _emit(True, [p.as_json() for p in found], [])
    sys.exit(0 if all(p.state == "ok" for p in found) else 1)


@main.command()
@click.option("--pipeline", help="one pipeline (default: all)")
@PIPELINES_DIR
@AS_JSON
def doctor(pipeline, pipelines_dir, as_json) -> None:
    """Check every part each pipeline depends on: pass / warn / fail, with the fix."""
    _connections()
    if not as_json:
        from tideline.ops.doctor import main as doctor_lines
        sys.exit(doctor_lines((["--pipeline", pipeline] if pipeline else [])
                              + (["--pipelines-dir", pipelines_dir] if pipelines_dir else [])))
    from tideline.core import doctor_checks as dc
    from tideline.core.config import load_pipelines
    from tideline.ops.doctor import run
    good, bad = load_pipelines(_folder(pipelines_dir))
    out = {"invalid": {str(p): str(e) for p, e in bad.items()}, "pipelines": {}}
    for name in [pipeline] if pipeline else sorted(good):
        if name not in good:
            raise click.UsageError(f"no pipeline {name!r}; pipelines: {', '.join(sorted(good)) or 'none'}")
        out["pipelines"][name] = [asdict(c) for c in run(good[name])]
    _emit(True, out, [])
    sys.exit(1 if bad or any(c["status"] == dc.FAIL for cs in out["pipelines"].values() for c in cs) else 0)


def _trigger(pipeline: str, action: str, tables: tuple[str, ...], pipelines_dir, airflow_url, as_json,
             **params) -> None:
    """The sync DAG triggered with the action's params, checked first as the DAG checks them."""
    import httpx

    from tideline.core.params import check_sync_params
    from tideline.view.actions import trigger_now
    cfg = _pipeline(_folder(pipelines_dir), pipeline)
    conf = {"action": action, "tables": list(tables), "resume_halted": action == "resume", **params}
    check_sync_params(cfg, conf)
    user, password = os.environ.get("TIDELINE_AIRFLOW_USER"), os.environ.get("TIDELINE_AIRFLOW_PASSWORD")
    if not (user and password):
        raise click.UsageError("set TIDELINE_AIRFLOW_USER and TIDELINE_AIRFLOW_PASSWORD: the run is triggered "
                               "through Airflow's REST API as that user")
    answer = httpx.post(f"{airflow_url}/auth/token", json={"username": user, "password": password}, timeout=30)
    if not answer.is_success:
        raise click.ClickException(f"Airflow at {airflow_url} refused the login of {user}: "
                                   f"{answer.status_code} {answer.text[:200]}")
    done = trigger_now(airflow_url, answer.json()["access_token"], f"sync_{cfg.name}", conf,
                       "triggered from the tideline command line")
    _emit(as_json, done, [done["message"], f"{airflow_url}/{done['link']}"])


AIRFLOW_URL = click.option("--airflow-url", envvar="TIDELINE_AIRFLOW_URL", default="http://localhost:8080",
                           show_default=True, help="Airflow's base URL (TIDELINE_AIRFLOW_URL)")


@main.command()
@click.argument("pipeline")
@click.option("--tables", "-t", multiple=True, required=True, help="a change-stream table (repeat for more)")
@AIRFLOW_URL
@PIPELINES_DIR
@AS_JSON
def pause(pipeline, tables, airflow_url, pipelines_dir, as_json) -> None:
    """Pause tables' streams (the others go on): triggers sync_PIPELINE with action=pause."""
    _trigger(pipeline, "pause", tables, pipelines_dir, airflow_url, as_json)


@main.command()
@click.argument("pipeline")
@click.option("--tables", "-t", multiple=True, required=True, help="a paused table (repeat for more)")
@AIRFLOW_URL
@PIPELINES_DIR
@AS_JSON
def resume(pipeline, tables, airflow_url, pipelines_dir, as_json) -> None:
    """Resume paused (or halted) tables: triggers sync_PIPELINE with action=resume."""
    _trigger(pipeline, "resume", tables, pipelines_dir, airflow_url, as_json)


@main.command()
@click.argument("pipeline")
@click.option("--drop-target", is_flag=True, help="also drop the target tables of the tables removed from the YAML")
@AIRFLOW_URL
@PIPELINES_DIR
@AS_JSON
def remove(pipeline, drop_target, airflow_url, pipelines_dir, as_json) -> None:
    """Take the tables removed from PIPELINE's YAML out of its capture and state: action=remove."""
    _trigger(pipeline, "remove", (), pipelines_dir, airflow_url, as_json, drop_target=drop_target)


@main.command()
@click.argument("pipeline")
@click.option("--confirm", required=True, help="the pipeline's name again")
@PIPELINES_DIR
@AS_JSON
def decommission(pipeline, confirm, pipelines_dir, as_json) -> None:
    """Remove a pipeline and everything it holds: connector, slot, publication, topics, state, DAGs."""
    from tideline.ops.lifecycle import check_confirmation, decommission as take_down
    _connections()
    check_confirmation(pipeline, confirm)
    folder = _folder(pipelines_dir)
    path = folder / f"{pipeline}.yaml"
    removed = list(take_down(_pipeline(folder, pipeline), config_path=path))
    _emit(as_json, {"pipeline": pipeline, "removed": removed}, [f"removed: {line}" for line in removed])


REACH = [click.option("--connect", multiple=True, help="Kafka Connect connection id(s) to look on"),
         click.option("--kafka", help="Kafka connection id of the orphans' topics"),
         click.option("--source", multiple=True, help="source connection id(s) of the orphans' slots")]


def _reach(f):
    for option in reversed(REACH):
        f = option(f)
    return f


@main.command()
@_reach
@PIPELINES_DIR
@AS_JSON
def orphans(connect, kafka, source, pipelines_dir, as_json) -> None:
    """What pipelines deleted without decommissioning left behind (connectors, slots, topics)."""
    from tideline.ops.lifecycle import Reach, orphans as find
    _connections()
    folder = _folder(pipelines_dir)
    found = find(folder, reach=Reach.of(folder, list(connect) or None, kafka, list(source) or None))
    _emit(as_json, [asdict(o) for o in found], [o.describe() for o in found] or
          ["no orphans: every Tideline connector belongs to a pipeline YAML"])


@main.command("remove-orphan")
@click.argument("connector")
@click.option("--confirm", required=True, help="the connector's name again")
@_reach
@PIPELINES_DIR
@AS_JSON
def remove_orphan(connector, confirm, connect, kafka, source, pipelines_dir, as_json) -> None:
    """Remove an orphan's connector, slot, publication and topics."""
    from tideline.ops.lifecycle import Reach, remove_orphan as take_down
    _connections()
    folder = _folder(pipelines_dir)
    removed = list(take_down(connector, folder, confirm=confirm,
                             reach=Reach.of(folder, list(connect) or None, kafka, list(source) or None)))
    _emit(as_json, {"connector": connector, "removed": removed}, [f"removed: {line}" for line in removed])


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.pass_context
def verify(ctx) -> None:
    """Compare a pipeline's target with its source, row for row (--pipeline NAME [--tables a,b] [--repair])."""
    from tideline.verify.command import main as verify_main
    sys.exit(verify_main(ctx.args))


def run(argv: list[str] | None = None) -> int:
    """The console script: a Tideline error is its message and exit status 2, never a traceback."""
    try:
        main.main(args=argv, prog_name="tideline", standalone_mode=False)
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.ClickException as exc:
        exc.show()
        return 2
    except click.exceptions.Abort:
        return 2
    except TidelineError as exc:
        click.echo(str(exc), err=True)
        return 2
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 2)
    return 0
