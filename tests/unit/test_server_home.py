"""services.base.server_home: a clone in a folder the server's OS user cannot enter (root's 0700
home) puts that server's files where it can, behind a link; a clone it can enter keeps them."""
import os
import pwd
import subprocess

import pytest

import services.base as base

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the servers as their own users")


@pytest.fixture
def tmp_path():
    """A folder the servers' users can reach (pytest's own sits under a 0700 one)."""
    import shutil
    import tempfile
    from pathlib import Path
    path = Path(tempfile.mkdtemp(prefix="tideline-home-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def _enters(user: str, path) -> bool:
    return subprocess.run(["runuser", "-u", user, "--", "test", "-w", str(path)]).returncode == 0


def _clone_in_a_closed_home(tmp_path, monkeypatch):
    """A clone's stack/var inside a 0700 home (root's), its servers' homes going to tmp/outside."""
    closed = tmp_path / "home"
    var = closed / "clone" / "stack" / "var"
    var.mkdir(parents=True)
    os.chmod(closed, 0o700)
    monkeypatch.setattr(base, "VAR", var)
    monkeypatch.setattr(base, "ROOT", closed / "clone")
    monkeypatch.setattr(base, "OUTSIDE_HOMES", tmp_path / "outside")
    return var


def test_a_folder_the_server_user_cannot_enter_moves_its_home_outside(tmp_path, monkeypatch):
    var = _clone_in_a_closed_home(tmp_path, monkeypatch)
    (var / "pg").mkdir()
    (var / "pg" / "left-by-an-earlier-try").write_text("x")
    assert not _enters("postgres", var / "pg")

    home = base.server_home("pg", "postgres")

    assert (var / "pg").is_symlink() and home == (var / "pg").resolve()
    assert home.is_relative_to(tmp_path / "outside")
    assert (home / "left-by-an-earlier-try").read_text() == "x"          # moved along, not lost
    assert pwd.getpwuid(home.stat().st_uid).pw_name == "postgres"
    assert _enters("postgres", home)
    assert base.server_home("pg", "postgres") == home                    # the next `up` finds it


def test_a_folder_the_server_user_can_enter_keeps_its_home(tmp_path, monkeypatch):
    var = tmp_path / "var"
    monkeypatch.setattr(base, "VAR", var)
    assert base.server_home("mariadb", "mysql") == var / "mariadb"
    assert not (var / "mariadb").is_symlink()
    assert base.server_home("mariadb", None) == var / "mariadb"


def test_a_fresh_clone_where_a_removed_one_was_starts_empty(tmp_path, monkeypatch):
    """`rm -rf ~/tl && git clone … ~/tl && make demo`: the removed clone's files outside (its
    link went with it) are not this clone's; reusing them gave a PostgreSQL whose state said
    'streaming' for topics the new Kafka never had."""
    var = _clone_in_a_closed_home(tmp_path, monkeypatch)
    home = base.server_home("pg", "postgres")
    (home / "PG_VERSION").write_text("15")
    (var / "pg").unlink()                      # the clone removed, a new one at the same path

    again = base.server_home("pg", "postgres")

    assert again == home and (var / "pg").is_symlink()
    assert list(again.iterdir()) == []


def test_a_second_stack_of_the_same_clone_never_takes_the_first_ones_home(tmp_path, monkeypatch):
    """test_secure starts a second stack (TIDELINE_STACK_VAR=VAR/secure) beside the running one:
    keyed by the clone, its PostgreSQL home outside was the first stack's, which it removed as
    "left by a removed clone" — the running stack's data gone mid-suite."""
    var = _clone_in_a_closed_home(tmp_path, monkeypatch)
    first = base.server_home("pg", "postgres")
    (first / "PG_VERSION").write_text("15")
    monkeypatch.setattr(base, "VAR", var / "secure")

    second = base.server_home("pg", "postgres")

    assert second != first and (var / "secure" / "pg").is_symlink()
    assert (first / "PG_VERSION").read_text() == "15"
