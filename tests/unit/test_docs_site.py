"""The docs site builds strict (a broken link, a missing page or anchor fails), and the README
stays a front page: what it is, the two commands, the matrix, the guarantees, links."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_site_builds_strict(tmp_path):
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir",
                          str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "site" / "operations" / "index.html").exists()


def test_the_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "make demo" in text and "make test" in text and "## The guarantees" in text
