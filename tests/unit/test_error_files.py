"""A Spark task's error file lives in Tideline's own temp folder, and the ones tasks killed -9 left
behind are removed once a day old (entrypoints.error_file_dir)."""
import os
import time

from tideline.entrypoints import error_file_dir


def test_error_files_older_than_a_day_are_removed_and_newer_ones_kept(tmp_path):
    folder = error_file_dir(str(tmp_path))
    assert folder.parent == tmp_path and folder.name == f"tideline-errors-{os.getuid()}"
    assert (folder.stat().st_mode & 0o777) == 0o700
    old, fresh, other = folder / "error-old.txt", folder / "error-new.txt", folder / "notes.md"
    for f in (old, fresh, other):
        f.write_text("x")
    two_days_ago = time.time() - 2 * 86_400
    os.utime(old, (two_days_ago, two_days_ago))
    os.utime(other, (two_days_ago, two_days_ago))
    assert error_file_dir(str(tmp_path)) == folder
    assert not old.exists() and fresh.exists() and other.exists()
