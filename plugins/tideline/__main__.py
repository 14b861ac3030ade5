"""`python -m tideline COMMAND ...`: the `tideline` command (tideline.cli) from a checkout, where
the package is not installed (the Makefile's commands, a deployment's `exec`)."""
from tideline.cli import run

if __name__ == "__main__":
    raise SystemExit(run())
