"""The library shipped to executors: every module of the package and its SQL, usable from the zip alone."""
import subprocess
import sys
import zipfile

from tideline import packaging


def from_zip(built, code: str, tmp_path) -> str:
    """What `code` prints in a fresh interpreter with only the zip `built` (and site-packages) on its path."""
    return subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, sys.argv[1]); {code}", str(built)],
                          capture_output=True, text=True, check=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}).stdout


def test_the_zip_holds_the_whole_package_and_imports_alone(tmp_path):
    built = packaging.library_zip(tmp_path)
    names = set(zipfile.ZipFile(built).namelist())
    assert {"tideline/__init__.py", "tideline/core/copy_text.py", "tideline/load/full_load.py"} <= names
    assert not any("__pycache__" in n for n in names)
    # a fresh interpreter with only the zip (and site-packages) on its path imports it from there
    out = from_zip(built, "import tideline.core.copy_text as m; print(m.__file__)", tmp_path)
    assert out.strip().startswith(str(built))


def test_sql_travels_in_the_zip_and_is_read_from_it(tmp_path):
    """A driver or executor importing Tideline from the zip (no checkout beside it) reads the
    SQL packed inside — the DAG's jobs failed when sqlfiles looked for sql/ next to the zip."""
    from tideline import sqlfiles
    built = packaging.library_zip(tmp_path)
    out = from_zip(built, "from tideline import sqlfiles as s; print(s.SQL_DIR); print(s.names('state')); "
                          "print(s.load('state/claim_epoch'), end='')", tmp_path)
    where, names, text = out.split("\n", 2)
    assert where.startswith(str(built))
    assert names == str(sqlfiles.names("state")) and "001_" in names
    assert text == sqlfiles.load("state/claim_epoch")


def test_the_same_sources_give_the_same_file(tmp_path):
    first = packaging.library_zip(tmp_path)
    stamp = first.stat().st_mtime_ns
    again = packaging.library_zip(tmp_path)
    assert again == first and again.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]


IMPORT_WITHOUT_COMPILING = (
    "import builtins, sys; sys.path.insert(0, sys.argv[1]); "
    "builtins.compile = lambda *a, **k: (_ for _ in ()).throw(AssertionError('compiled ' + str(a[1])))\n"
    "import tideline.core.copy_text as m; print(m.__file__)")


def test_the_zips_modules_are_read_from_their_bytecode_not_compiled(tmp_path):
    """Every Spark process imports from the zips; Python cannot cache what it compiles from a zip,
    so the zip carries each module's bytecode and nothing is compiled at import."""
    built = packaging.library_zip(tmp_path)
    assert "tideline/core/copy_text.pyc" in zipfile.ZipFile(built).namelist()
    out = subprocess.run([sys.executable, "-c", IMPORT_WITHOUT_COMPILING, str(built)], capture_output=True,
                         text=True, check=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}).stdout
    assert out.strip().startswith(str(built))


def test_a_zip_without_bytecode_gets_it_once_and_a_wrong_python_compiles_the_source(tmp_path):
    plain = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain, "w") as z:
        z.writestr("tideline/__init__.py", "")
        z.writestr("tideline/core/__init__.py", "")
        z.writestr("tideline/core/copy_text.py", "ANSWER = 42\n")
    assert packaging.with_bytecode(plain) is True
    assert packaging.with_bytecode(plain) is False          # already done: left as it is
    run = [sys.executable, "-c", IMPORT_WITHOUT_COMPILING, str(plain)]
    assert subprocess.run(run, capture_output=True, text=True, cwd=tmp_path).returncode == 0
    # bytecode of another Python (its magic number differs): the source is compiled, as without it
    stale = tmp_path / "stale.zip"
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(stale, "w") as z:
        for info in src.infolist():
            data = src.read(info)
            z.writestr(info, b"\0\0\r\n" + data[4:] if info.filename.endswith(".pyc") else data)
    got = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                          "import tideline.core.copy_text as m; print(m.ANSWER)", str(stale)],
                         capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert got.strip() == "42"
    refused = subprocess.run([sys.executable, "-c", IMPORT_WITHOUT_COMPILING, str(stale)], capture_output=True,
                             text=True, cwd=tmp_path)
    assert "AssertionError: compiled" in refused.stderr


def test_the_target_registry_finds_its_targets_inside_the_zip(tmp_path):
    """The registry discovers the target packages by listing its own package: from a zip too
    (a driver or executor on a cluster imports Tideline only from it)."""
    built = packaging.library_zip(tmp_path)
    out = from_zip(built, "from tideline import targets; print(targets.kinds(), "
                          "targets.target_class('postgres').__module__, targets.__file__)", tmp_path)
    assert out.startswith("['iceberg', 'postgres'] tideline.targets.postgres.target ") and str(built) in out
