"""Test modules are imported by basename (no packages under tests/), so two files with one name
break collection of the whole suite: "import file mismatch". This guard fails on the pair."""
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_no_two_test_modules_share_a_basename():
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "bench" not in p.parts)
    assert [n for n, c in names.items() if c > 1] == []
