"""The library a Spark job ships to its executors (`--py-files`, as the Spark docs recommend for
Python dependencies): a zip of the `tideline` package of this checkout, with its SQL files. Executors on a cluster
import Tideline only from it — nothing of the Airflow host is assumed on a worker. The file is
named by its content's hash: an unchanged library is built once, and two tasks building at once
write the same bytes under the same name (atomically renamed into place)."""
from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def _sources() -> list[tuple[str, Path]]:
    """(name in the zip, file): the package's modules, and the SQL files under tideline/_sql/."""
    from tideline import sqlfiles
    modules = [(str(p.relative_to(PACKAGE.parent)), p) for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts]
    sql = [(f"tideline/{sqlfiles.PACKED}/{p.relative_to(sqlfiles.SQL_DIR)}", p) for p in Path(sqlfiles.SQL_DIR).rglob("*.sql")]
    return sorted(modules + sql)


def library_zip(dest_dir: Path | None = None) -> Path:
    """The zip for --py-files (tideline/… at its root), built if this version is not there yet."""
    files = _sources()
    digest = hashlib.sha256()
    for name, p in files:
        digest.update(name.encode())
        digest.update(p.read_bytes())
    dest_dir = Path(dest_dir or os.environ.get("TIDELINE_DIST_DIR") or Path(tempfile.gettempdir()) / "tideline-dist")
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / f"tideline-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    fd, tmp = tempfile.mkstemp(dir=dest_dir, suffix=".zip.tmp")
    os.close(fd)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name, p in files:
            # a fixed timestamp: the same sources give the same bytes
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, p.read_bytes())
    os.replace(tmp, target)
    return target
