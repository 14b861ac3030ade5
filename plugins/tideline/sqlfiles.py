"""SQL lives in sql/ as files; this loads them by name (cached)."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

SQL_DIR = Path(os.environ.get("TIDELINE_SQL_DIR", Path(__file__).resolve().parents[2] / "sql"))


@lru_cache(maxsize=None)
def load(name: str) -> str:
    """`load("state/claim_epoch")` -> the text of sql/state/claim_epoch.sql."""
    return (SQL_DIR / f"{name}.sql").read_text()
