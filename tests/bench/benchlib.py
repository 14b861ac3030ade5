"""What the benchmarks share: the stack's environment, autocommit connections, peak memory."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import psutil
import psycopg2

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "stack"))
sys.path.insert(0, str(ROOT / "plugins"))
import stackctl  # noqa: E402


def pg(db: str):
    """Autocommit connection to a stack database by its full name."""
    conn = psycopg2.connect(stackctl.pg_url(db))
    conn.autocommit = True
    return conn


class PeakRss(threading.Thread):
    """Peak resident memory of a process tree, sampled every 100 ms; `done.set()` stops it."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.root, self.peak, self.done = psutil.Process(pid), 0, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
                self.peak = max(self.peak, sum(p.memory_info().rss for p in procs if p.is_running()))
            except psutil.Error:
                pass
            time.sleep(0.1)
