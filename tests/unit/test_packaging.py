"""The library shipped to executors: every module of the package and its SQL, usable from the zip alone."""
import subprocess
import sys
import zipfile

from tideline import packaging


def test_the_zip_holds_the_whole_package_and_imports_alone(tmp_path):
    built = packaging.library_zip(tmp_path)
    names = set(zipfile.ZipFile(built).namelist())
    assert {"tideline/__init__.py", "tideline/core/copy_text.py", "tideline/load/full_load.py"} <= names
    assert not any("__pycache__" in n for n in names)
    # a fresh interpreter with only the zip (and site-packages) on its path imports it from there
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                          "import tideline.core.copy_text as m; print(m.__file__)", str(built)],
                         capture_output=True, text=True, check=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin"}).stdout
    assert out.strip().startswith(str(built))


def test_sql_travels_in_the_zip_and_is_read_from_it(tmp_path):
    """A driver or executor importing Tideline from the zip (no checkout beside it) reads the
    SQL packed inside — the DAG's jobs failed when sqlfiles looked for sql/ next to the zip."""
    from tideline import sqlfiles
    built = packaging.library_zip(tmp_path)
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                          "from tideline import sqlfiles as s; print(s.SQL_DIR); print(s.names('state')); "
                          "print(s.load('state/claim_epoch'), end='')", str(built)],
                         capture_output=True, text=True, check=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin"}).stdout
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
