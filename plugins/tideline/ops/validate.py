"""Pipeline files checked offline, as the DAG factory reads them (`make validate`)."""
from __future__ import annotations

from pathlib import Path

from tideline.core.config import load_pipeline
from tideline.core.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    """`python -m tideline.ops.validate [FILE ...]` (`make validate`): every pipeline file given, or
    every one in the pipelines folder, checked offline — no database, Kafka or Airflow — as the DAG
    factory reads them; each problem named with file, line and field. Exit 1 when any is invalid."""
    import sys
    from tideline.entrypoints import pipelines_dir
    files = [Path(a) for a in (sys.argv[1:] if argv is None else argv)] or sorted(pipelines_dir().glob("*.yaml"))
    bad = 0
    for path in files:
        try:
            cfg = load_pipeline(path)
            print(f"ok      {path}: pipeline {cfg.name}, {len(cfg.tables)} table(s), {cfg.source.kind} -> "
                  f"{cfg.target.kind}")
        except ConfigError as exc:
            bad += 1
            print(f"INVALID {exc}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
