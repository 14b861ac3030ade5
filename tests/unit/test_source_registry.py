"""The source seam, as the targets' one: a registry that reads each source package's declaration
without importing its driver, the pure core's facts of each kind in one table (core.support.SOURCES)
that the registry holds to the packages, and no source-kind branch outside them."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tideline import engines
from tideline.core import support
from tideline.core.config import parse_pipeline
from tideline.core.connections import Conn
from tideline.core.errors import ConfigError
from tideline.core.row_filter import parse
from tideline.engines import SourceCapabilities, SourceEngine, SourceSpec

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "plugins" / "tideline"


def test_the_kinds_are_read_without_importing_any_source_driver():
    """(psycopg2 apart: the state room needs it anyway, as for the targets' registry.)"""
    code = ("import sys; from tideline import engines; assert engines.kinds() == ['mariadb', 'postgres']; "
            "assert engines.spec('mariadb').conn_types == ('mysql', 'mariadb'); "
            "loaded = [m for m in sys.modules if m.startswith('pymysql') "
            "or m in ('tideline.engines.postgres.engine', 'tideline.engines.mariadb.engine')]; "
            "assert not loaded, loaded; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT / "plugins")})
    assert out.stdout.strip() == "ok", out.stderr


def test_each_connection_type_names_its_kind_and_an_unknown_one_is_refused_listing_them():
    assert engines.kind_of_connection(Conn("s", "postgresql", "h", 5432, "u", "p", "db")) == "postgres"
    assert engines.kind_of_connection(Conn("s", "mysql", "h", 3306, "u", "p", "db")) == "mariadb"
    with pytest.raises(ConfigError, match="a Tideline source is a connection of type mariadb, mysql, postgres, "
                                          "postgresql"):
        engines.kind_of_connection(Conn("s", "oracle", "h", 1521, "u", "p", "db"))


# ------------------------------------------------------------------ a third source, as its author starts it

class CsvEngine(SourceEngine):
    """A throwaway source: a folder of CSV files. Its skeleton, to show what adding one touches."""
    label = "CSV files"


@pytest.fixture
def csv_source(monkeypatch):
    engines.kinds()   # the packages registered first
    engines.register(SourceSpec(kind="csv", conn_types=("fs",), implementation=f"{__name__}:CsvEngine",
                                capabilities=SourceCapabilities(batch=True)))
    yield monkeypatch
    engines.unregister("csv")


def test_a_new_source_is_its_package_plus_its_lines_in_the_support_table(csv_source):
    with pytest.raises(ConfigError, match="csv: is a registered source with no line in core.support.SOURCES"):
        engines.check_support()
    csv_source.setitem(support.SOURCES, "csv", support.SourceFacts((), (), "sqlite", False))
    csv_source.setitem(support.SUPPORT, ("csv", "postgres"), frozenset({"batch"}))
    engines.check_support()
    assert engines.kind_of_connection(Conn("s", "fs", None, None, None, None, "/data")) == "csv"
    # its facts are what the core reads: a row filter in its own SQL, its names as written
    assert parse('"Price" > 3', "csv").unknown(["price"]) == []
    cfg = parse_pipeline({"name": "files", "source": {"kind": "csv", "conn_id": "s"}, "target": {"conn_id": "t"},
                          "kafka": {"topic_prefix": "tl.files"},
                          "tables": [{"name": "orders", "mode": "batch", "cursor_column": "at"}]}, "files.yaml")
    assert cfg.source.kind == "csv"
    with pytest.raises(ConfigError) as info:   # a skeleton yet: what it declares names what it must implement
        engines.for_pipeline(cfg, Conn("s", "fs", None, None, None, None, "/data"))
    said = str(info.value)
    assert "load needs ReadsSnapshots (open_snapshot, read_query)" in said, said
    assert "batch needs ReadsIntervals (cursor_bounds, interval_read)" in said, said
    assert "every source needs" in said and "describe" in said and "Captures" not in said, said


def test_the_support_table_lists_only_modes_a_source_declares(csv_source):
    csv_source.setitem(support.SOURCES, "csv", support.SourceFacts((), (), "sqlite", False))
    csv_source.setitem(support.SUPPORT, ("csv", "postgres"), frozenset({"batch", "cdc"}))
    with pytest.raises(ConfigError, match="csv -> postgres: lists cdc but the csv source's capabilities do not "
                                          "promise capture"):
        engines.check_support()


def test_every_source_keeps_its_promises_and_a_caller_asks_for_a_capability_by_its_interface():
    for kind in engines.kinds():
        cls = engines.engine_class(kind)
        assert all(issubclass(cls, i) for p in engines.spec(kind).capabilities.promised()
                   for i in engines.interfaces.PROMISES[p])
    postgres = engines.engine_class("postgres")(Conn("s", "postgres", "h", 5432, "u", "p", "db"))
    assert engines.able(postgres, engines.Captures) is postgres


def test_no_source_kind_is_named_outside_the_source_packages_and_the_support_table():
    """What made a third source touch a dozen files: `kind == "mariadb"` and `{"postgres": ..., "mariadb": ...}`
    in the core, the lifecycle and the registry's if/else. Now they are facts in core.support.SOURCES
    or methods of the engine."""
    branch = re.compile(r"""kind[^\n]{0,40}(==|!=|startswith\(|\bin\b)\s*\(?["'](postgres|mariadb|mysql)"""
                        r"""|\{\s*["'](postgres|mariadb)["']\s*:""")
    allowed = {PACKAGE / "core" / "support.py"}
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted(PACKAGE.rglob("*.py"))
             if p not in allowed and "engines" not in p.relative_to(PACKAGE).parts[:1]
             for n, line in enumerate(p.read_text().splitlines(), 1) if branch.search(line)]
    assert found == [], found


def test_every_source_interface_is_small():
    """What a new source implements is what it declares: no interface is wider than sixteen methods
    (SourceEngine had 49 before it was cut by capability)."""
    import inspect
    from tideline.engines import interfaces
    cut = [SourceEngine] + [c for c in vars(interfaces).values() if inspect.isclass(c) and hasattr(c, "what")
                            and c.__module__ == interfaces.__name__]
    widths = {c.__name__: len([m for m, v in vars(c).items() if callable(v) and not m.startswith("_")]) for c in cut}
    assert len(cut) == 8 and max(widths.values()) <= 16, widths
