"""The tools a user would pick instead of Tideline, installed by the benchmarks themselves.

Python peers go into their own virtualenv under the stack's data folder (PyPI, once; their
dependencies never meet Tideline's pins); Debian peers (pgcopydb, pgloader) come from apt.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchlib import stackctl

PEERS = Path(stackctl.VAR) / "bench-peers"
RELADIFF = "reladiff[postgresql]==0.6.0"


def reladiff() -> str:
    """The reladiff command line (reladiff 0.6.0, the maintained fork of data-diff)."""
    venv = PEERS / "reladiff"
    exe = venv / "bin" / "reladiff"
    if not exe.exists():
        print(f"[bench] installing {RELADIFF} into {venv} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", RELADIFF], check=True)
    return str(exe)


def debian_tool(command: str, package: str | None = None) -> str:
    """A peer packaged by Debian (pgcopydb, pgloader): apt-get installs it once when missing."""
    import shutil
    found = shutil.which(command)
    if found is None:
        print(f"[bench] installing Debian's {package or command} (once)", flush=True)
        subprocess.run(["apt-get", "install", "-y", "-q", package or command], check=True,
                       stdout=subprocess.DEVNULL)
        found = shutil.which(command)
    if found is None:
        raise SystemExit(f"[bench] {command} is not on PATH after installing {package or command}")
    return found
