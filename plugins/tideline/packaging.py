"""The library a Spark job ships to its executors (`--py-files`, as the Spark docs recommend for
Python dependencies): a zip of the `tideline` package of this checkout, with its SQL files. Executors on a cluster
import Tideline only from it — nothing of the Airflow host is assumed on a worker. The file is
named by its content's hash: an unchanged library is built once, and two tasks building at once
write the same bytes under the same name (atomically renamed into place).

Python imports from a zip without caching its bytecode: every Spark process compiled each
module it imported from a zip (the driver and every Python worker: pyspark's own zip alone is
~180 modules, ~0.45 s of each process's start). So the zips carry each module's bytecode beside
its source (`with_bytecode`): for this Python they are read, not compiled; a Python of another
version finds their magic number wrong and compiles the source as before."""
from __future__ import annotations

import hashlib
import importlib.util
import marshal
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
            _write(z, name, p.read_bytes(), (2020, 1, 1, 0, 0, 0), target)
    os.replace(tmp, target)
    return target


def _write(z: zipfile.ZipFile, name: str, data: bytes, date_time: tuple, archive: Path) -> None:
    """One file into the zip, and a module's bytecode beside it."""
    entries = [(name, data)]
    if name.endswith(".py"):
        entries.append((name + "c", bytecode(data, f"{archive}/{name}")))
    for entry, content in entries:
        info = zipfile.ZipInfo(entry, date_time=date_time)
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, content)


def bytecode(source: bytes, path: str) -> bytes:
    """A module's .pyc, hash-based and unchecked (PEP 552): zipimport uses it without comparing
    times, which a zip keeps only to two seconds. The zip it sits in is rewritten whole whenever
    a source changes, so the bytecode cannot go stale."""
    code = compile(source, path, "exec", dont_inherit=True)
    flags = (0b01).to_bytes(4, "little")   # hash-based, not checked against the source
    return importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + marshal.dumps(code)


def with_bytecode(archive: Path) -> bool:
    """Adds each module's bytecode to a zip of Python modules that has none yet (pyspark's own
    zips, which Spark puts first on every driver's and Python worker's path); atomically, so a
    process importing from it meanwhile reads the old file. True when it rewrote the zip."""
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
        if any(n.endswith(".pyc") for n in names):
            return False
        entries = [(info, z.read(info)) for info in z.infolist()]
    fd, tmp = tempfile.mkstemp(dir=archive.parent, suffix=".zip.tmp")
    os.close(fd)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for info, data in entries:
            _write(z, info.filename, data, info.date_time, archive)
    os.chmod(tmp, os.stat(archive).st_mode & 0o777)
    os.replace(tmp, archive)
    return True
