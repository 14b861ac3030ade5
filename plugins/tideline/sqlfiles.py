"""SQL lives in sql/ as files; this loads them by name (cached).

From a checkout the files are read from the repository's sql/ folder (or TIDELINE_SQL_DIR). A job
that imports Tideline from the library zip shipped with it (packaging.library_zip, which is what a
Spark driver and its executors do once `--py-files` puts the zip first on sys.path) reads the
copy packed inside the zip under tideline/_sql/ — the zip is the whole library, SQL included."""
from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from pathlib import Path

PACKED = "_sql"  # where library_zip puts sql/ inside the package


def _root():
    if os.environ.get("TIDELINE_SQL_DIR"):
        return Path(os.environ["TIDELINE_SQL_DIR"])
    checkout = Path(__file__).resolve().parents[2] / "sql"
    if checkout.is_dir():
        return checkout
    return resources.files("tideline") / PACKED


SQL_DIR = _root()


@lru_cache(maxsize=None)
def load(name: str) -> str:
    """`load("state/claim_epoch")` -> the text of sql/state/claim_epoch.sql."""
    return (SQL_DIR / f"{name}.sql").read_text()


def names(folder: str) -> list[str]:
    """The file names in one folder of sql/, sorted (e.g. the state migrations)."""
    return sorted(p.name for p in (SQL_DIR / folder).iterdir() if p.name.endswith(".sql"))
