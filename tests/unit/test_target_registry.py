"""The target seam: a registry that reads each target's declaration without importing its client,
refuses a target that promises what it does not implement, and a support table per (source,
target, mode) that config validation, DAG building and the docs follow."""
import subprocess
import sys
from pathlib import Path

import pytest

from tideline import targets
from tideline.core import support
from tideline.core.config import parse_pipeline
from tideline.core.connections import Conn
from tideline.core.errors import ConfigError, TargetError
from tideline.targets import Capabilities, Published, SnapshotLoad, Target, TargetSpec

ROOT = Path(__file__).resolve().parents[2]


def pipeline(source_kind="postgres", target_kind="postgres", tables=None):
    return {"name": "shop", "source": {"kind": source_kind, "conn_id": "src"},
            "target": {"kind": target_kind, "conn_id": "tgt"}, "kafka": {"topic_prefix": "tl.shop"},
            "tables": tables or [{"name": "orders"}]}


def test_capabilities_are_read_without_importing_any_target_or_its_client():
    code = ("import sys; from tideline import targets; caps = targets.capabilities('iceberg'); "
            "assert caps.maintenance and not caps.holds_state; assert targets.kinds() == ['iceberg', 'postgres']; "
            "assert targets.spec('iceberg').jars_env == 'TIDELINE_ICEBERG_JARS'; "
            "loaded = [m for m in sys.modules if m.startswith(('pyspark', 'pyiceberg', 'py4j')) "
            "or m in ('tideline.targets.iceberg.target', 'tideline.targets.postgres.target')]; "
            "assert not loaded, loaded; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT / "plugins")})
    assert out.stdout.strip() == "ok", out.stderr


def test_every_registered_target_keeps_its_promises_and_the_support_table_names_exactly_them():
    targets.check_support()
    assert targets.kinds() == support.target_kinds()
    for kind in targets.kinds():
        cls = targets.target_class(kind)
        assert cls.kind == kind and cls.capabilities() == targets.capabilities(kind)
        assert targets.missing_methods(cls, cls.capabilities()) == {}


# ------------------------------------------------------------------ a third target, as its author starts it

class DuckTarget(Target):
    """A new target's first skeleton: it can publish a snapshot, no more yet."""
    kind = "duck"

    def prepare_schema(self, conn, schema, label):
        pass

    def can_create(self, conn, schema):
        return True

    def table_exists(self, conn, schema, table):
        return False

    def drop_table(self, schema, table):
        return False

    def row_count(self, conn, schema, table, exact=True):
        return None

    def stored_so_far(self, state_conn, schema, table):
        return None

    def publish_snapshot(self, load: SnapshotLoad) -> Published:
        return Published(0, "nothing", "committed", 0.0)


@pytest.fixture
def duck():
    """Registers the fake `duck` target (as its package's TARGET would) for one test."""
    made = []

    def register(**caps):
        spec = TargetSpec(kind="duck", conn_types=("duckdb",), implementation=f"{__name__}:DuckTarget",
                          capabilities=Capabilities(holds_state=False, snapshot_publish="commit", copy_in=False,
                                                    verifies=False, **caps))
        targets.register(spec)
        made.append(spec)
        return spec
    yield register
    targets.unregister("duck")


def test_a_new_target_that_promises_the_stream_without_implementing_it_is_refused_naming_what_is_missing(duck):
    duck(stream=True)
    with pytest.raises(ConfigError) as info:
        targets.target_class("duck")
    message = str(info.value)
    assert "target kind 'duck'" in message and f"{__name__}:DuckTarget" in message
    assert "stream needs StreamsChanges (apply_changes, columns, evolve)" in message
    assert "declare the capability false" in message


class HalfStreamingDuck(DuckTarget, targets.StreamsChanges):
    """It took the stream's interface but has written one of its methods only."""

    def columns(self, cur, schema, table):
        return []


def test_a_target_that_takes_an_interface_but_leaves_methods_of_it_unwritten_is_refused_naming_them(duck):
    spec = duck(stream=True)
    targets.register(TargetSpec(**{**spec.__dict__, "implementation": f"{__name__}:HalfStreamingDuck"}))
    with pytest.raises(ConfigError) as info:
        targets.target_class("duck")
    assert "stream needs apply_changes, evolve" in str(info.value)


def test_a_caller_asks_for_a_capability_by_its_interface_and_a_target_without_it_says_what_it_cannot_do(duck):
    duck(stream=False)
    target = targets.target_class("duck")(Conn("t", "duckdb", None, None, None, None, "/tmp/x.duckdb"))
    with pytest.raises(TargetError) as info:
        targets.able(target, targets.Verifies)
    assert str(info.value).startswith("the duck target (connection 't') cannot do verify and repair")
    postgres = targets.target_class("postgres")(Conn("t", "postgres", "h", 5432, "u", "p", "db"))
    assert targets.able(postgres, targets.StreamsChanges) is postgres


def test_every_interface_is_small():
    """What a new target implements is what it declares: no interface is wider than a dozen
    methods (Target had 46 before it was cut by capability)."""
    import inspect
    from tideline.targets import interfaces
    cut = [Target] + [c for c in vars(interfaces).values() if inspect.isclass(c) and c.__module__ == interfaces.__name__
                      and hasattr(c, "what")]
    widths = {c.__name__: len([m for m, v in vars(c).items() if callable(v) and not m.startswith("_")]) for c in cut}
    assert max(widths.values()) <= 16, widths


def test_a_new_target_whose_promises_are_kept_loads_and_the_support_table_must_name_it(duck, monkeypatch):
    duck(stream=False)
    assert targets.target_class("duck") is DuckTarget
    with pytest.raises(ConfigError, match="'duck'|duck: is a registered target that the support table gives no"):
        targets.check_support()
    # its row in the support table: a mode its capabilities do not promise is refused too
    monkeypatch.setitem(support.SUPPORT, ("postgres", "duck"), frozenset({"cdc"}))
    with pytest.raises(ConfigError) as info:
        targets.check_support()
    assert "postgres -> duck: lists cdc but the duck target's capabilities do not promise stream" in str(info.value)
    monkeypatch.setitem(support.SUPPORT, ("postgres", "duck"), frozenset())
    targets.check_support()
    # a pipeline into it is refused for what the pair does not support, in the config's own words
    with pytest.raises(ConfigError) as info:
        parse_pipeline(pipeline(target_kind="duck"), "pipelines/shop.yaml")
    assert "cdc is not supported from postgres into duck (this pair supports: nothing yet)" in str(info.value)


# ------------------------------------------------------------------ one truth for the kind

def test_the_pipeline_names_the_kind_and_a_connection_of_another_kind_is_refused_naming_both():
    cfg = parse_pipeline(pipeline(target_kind="iceberg"), "pipelines/shop.yaml")
    with pytest.raises(ConfigError) as info:
        targets.for_pipeline(cfg, Conn("tgt", "postgres", "localhost", 5432, "u", "p", "db"))
    assert "target.kind: is 'iceberg', but connection 'tgt' is a postgres connection" in str(info.value)
    from tideline import engines
    cfg = parse_pipeline(pipeline(source_kind="mariadb"), "pipelines/shop.yaml")
    with pytest.raises(ConfigError, match="source.kind: is 'mariadb', but connection 'src' is a postgres connection"):
        engines.for_pipeline(cfg, Conn("src", "postgres", "localhost", 5432, "u", "p", "db"))
    with pytest.raises(ConfigError, match="conn_type: is 'http'; a Tideline target is a connection of type"):
        targets.kind_of_connection(Conn("x", "http", "localhost", 80, None, None, None))


def test_an_unknown_kind_is_refused_listing_the_kinds():
    with pytest.raises(ConfigError) as info:
        parse_pipeline(pipeline(target_kind="clickhouse"), "pipelines/shop.yaml")
    assert "target.kind" in str(info.value) and "the kinds of target are: iceberg, postgres" in str(info.value)
    with pytest.raises(ConfigError, match="the kinds of source are: mariadb, postgres"):
        parse_pipeline(pipeline(source_kind="oracle"), "pipelines/shop.yaml")


# ------------------------------------------------------------------ support per pair

def test_a_mode_the_pair_does_not_support_is_refused_saying_what_it_supports():
    batch = [{"name": "orders"}, {"name": "events", "mode": "batch", "cursor_column": "updated_at"}]
    parse_pipeline(pipeline(tables=batch), "pipelines/shop.yaml")   # postgres -> postgres: batch is built
    with pytest.raises(ConfigError) as info:
        parse_pipeline(pipeline("mariadb", "iceberg", tables=batch), "pipelines/shop.yaml")
    message = str(info.value)
    assert "tables events are in batch mode, but batch is not supported from mariadb into iceberg" in message
    assert "this pair supports: cdc, extras, history, maintenance" in message and "from mariadb, batch works into: postgres" in message


def test_dags_follow_the_support_table(monkeypatch):
    from tideline.airflow.dag_factory import build_sync_dag
    from tideline.core.params import ParamError, check_sync_params
    lake_from_mariadb = parse_pipeline(pipeline("mariadb", "iceberg"), "pipelines/shop.yaml")
    assert not lake_from_mariadb.supports("verify") and lake_from_mariadb.supports("maintenance")
    dag = build_sync_dag(lake_from_mariadb)
    assert "repair" not in dag.task_ids and "validate" not in dag.task_ids
    assert dag.params.get_param("action").schema["enum"] == ["auto", "full_reload", "pause", "resume", "remove", "decommission"]
    with pytest.raises(ParamError, match="validate needs verify, which is not supported from mariadb into iceberg"):
        check_sync_params(lake_from_mariadb, {"action": "validate"})
    lake = parse_pipeline(pipeline("postgres", "iceberg"), "pipelines/shop.yaml")
    assert {"repair", "validate"} <= set(build_sync_dag(lake).task_ids)


def test_the_docs_support_matrix_is_the_support_table():
    page = (ROOT / "docs" / "reference" / "support.md").read_text()
    assert support.matrix_markdown() in page, "docs/reference/support.md drifted: run `python -m tideline.core.support`"
