"""`python -m tideline COMMAND ...`: Tideline's commands in one place, for a deployment where the
Makefile is not at hand (the docker/ image: `docker compose exec airflow-scheduler python -m
tideline validate /opt/tideline/pipelines/*.yaml`). Each command is the module the Makefile runs."""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "validate": ("tideline.ops.validate", "check pipeline YAMLs offline: file, line and field of each problem"),
    "status": ("tideline.ops.status", "where every pipeline's tables stand"),
    "doctor": ("tideline.ops.doctor", "check every part each pipeline depends on: pass / warn / fail"),
    "verify": ("tideline.verify.compare", "compare a pipeline's target with its source, row for row"),
    "lifecycle": ("tideline.ops.lifecycle", "orphans, removal and decommission of pipelines"),
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help") or args[0] not in COMMANDS:
        out = sys.stdout if args and args[0] in ("-h", "--help", "help") else sys.stderr
        if args and args[0] not in ("-h", "--help", "help"):
            print(f"tideline: no command {args[0]!r}", file=out)
        print("usage: python -m tideline COMMAND [ARGS]\n\ncommands:", file=out)
        for name, (_module, about) in COMMANDS.items():
            print(f"  {name:10s} {about}", file=out)
        return 0 if out is sys.stdout else 2
    module = importlib.import_module(COMMANDS[args[0]][0])
    return module.main(args[1:]) or 0


if __name__ == "__main__":
    raise SystemExit(main())
