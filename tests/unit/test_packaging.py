"""The library shipped to executors: every module of the package, importable from the zip alone."""
import subprocess
import sys
import zipfile

from tideline import packaging


def test_the_zip_holds_the_whole_package_and_imports_alone(tmp_path):
    built = packaging.library_zip(tmp_path)
    names = set(zipfile.ZipFile(built).namelist())
    assert {"tideline/__init__.py", "tideline/core/copy_text.py", "tideline/full_load.py"} <= names
    assert not any("__pycache__" in n for n in names)
    # a fresh interpreter with only the zip (and site-packages) on its path imports it from there
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                          "import tideline.core.copy_text as m; print(m.__file__)", str(built)],
                         capture_output=True, text=True, check=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin"}).stdout
    assert out.strip().startswith(str(built))


def test_the_same_sources_give_the_same_file(tmp_path):
    first = packaging.library_zip(tmp_path)
    stamp = first.stat().st_mtime_ns
    again = packaging.library_zip(tmp_path)
    assert again == first and again.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]
