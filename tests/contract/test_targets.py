"""The target contract: what every registered target must do for Tideline's guarantees, run
against each real one in each configuration a team runs it in (the stack's PostgreSQL; Iceberg
tables of the JDBC catalog on a file warehouse, and of the REST catalog on the S3 store with the
state in a database of its own, written by a local Spark session) — without Kafka, Connect or
Airflow, so a change to the seam is checked in minutes. A new target joins by being registered
(targets.kinds()) and naming its test configuration in CONFIGURATIONS.

The load runs through FullLoad.load_table with the handover position given (what Kafka's end
offsets would be); a stream batch is raw change records, decoded, split and committed by the real
BatchCommitter — everything the stream does after Spark hands it a batch.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

import psycopg2
import pyarrow as pa
import pytest

from tideline import engines, state, targets
from tideline.core.batch_events import split_batch
from tideline.core.change_events import decode_records
from tideline.core.config import parse_pipeline
from tideline.core.connections import get_connection
from tideline.core.errors import FencedError
from tideline.load.full_load import FullLoad
from tideline.stream.commit import BatchCommitter, StreamTable

pytestmark = pytest.mark.integration

# the configurations each kind of target is tested in (the stack's connections): name -> (kind, the
# target's connection, the state's where it lives apart). Iceberg twice: its JDBC catalog in
# PostgreSQL with a file warehouse (the state in the catalog's database), and the REST catalog with
# its warehouse on the S3 store (services.lake), the state in a PostgreSQL database of its own.
CONFIGURATIONS = {"postgres": ("postgres", "tideline_target", None),
                  "iceberg": ("iceberg", "tideline_lake", None),
                  "iceberg-rest-s3": ("iceberg", "tideline_lake_rest", "tideline_state")}
TOPIC_ID = "contract-topic"
NOW = datetime.now(timezone.utc)


def _kinds(capability: str | None = None) -> list[str]:
    """The configurations whose kind of target has `capability` (every registered kind has one)."""
    unnamed = set(targets.kinds()) - {kind for kind, _c, _s in CONFIGURATIONS.values()}
    assert not unnamed, f"target kinds {unnamed} are registered: name a test configuration in CONFIGURATIONS"
    return [name for name, (kind, _c, _s) in CONFIGURATIONS.items()
            if capability is None or getattr(targets.capabilities(kind), capability)]


class Contract:
    """One kind of target under test: a pipeline of one source table into it, its rows read back
    in one form whatever the target, and everything it made removed afterwards."""

    def __init__(self, configuration: str, name: str, spark, source_db, table: dict | None = None):
        kind, conn_id, state_conn_id = CONFIGURATIONS[configuration]
        self.kind, self.name, self.spark, self.source_db = kind, name, spark, source_db
        self.table = f"{name}_t"
        self.cfg = parse_pipeline({
            "name": name, "source": {"conn_id": "tideline_source", "schema": "public"},
            "target": {"kind": kind, "conn_id": conn_id, "schema": name},
            **({"state": {"conn_id": state_conn_id}} if state_conn_id else {}),
            "kafka": {"topic_prefix": f"contract.{name}", "partitions": 1},
            "spark": {"parallelism": 1}, "tables": [{"name": self.table, **(table or {})}]}, f"{name}.yaml")
        self.conn = get_connection(conn_id)
        self.store = targets.for_pipeline(self.cfg, self.conn)
        self.store.use(spark)
        self.state = self.store.connect()
        state.migrate(self.state)
        self.offset = 0
        with source_db.cursor() as cur:
            cur.execute(f"CREATE TABLE public.{self.table} (id int PRIMARY KEY, note text, amount numeric(12,2), "
                        f"tags text[])")
            cur.execute(f"INSERT INTO public.{self.table} VALUES (1, 'Zoë 😀', 1.50, ARRAY['a', NULL, '']), "
                        f"(2, '', -0.01, '{{}}'), (3, NULL, NULL, NULL), (4, 'line\nbreak \\N', 99999.99, "
                        f"ARRAY['back\\slash', 'c\"d'])")

    # ---------------------------------------------------------------- the two sides, in one form
    def source_rows(self) -> list[tuple]:
        with self.source_db.cursor() as cur:
            cur.execute(f"SELECT id, note, amount, tags FROM public.{self.table} ORDER BY id")
            return [(i, n, None if a is None else str(a), t) for i, n, a, t in cur.fetchall()]

    def target_rows(self) -> list[tuple]:
        """The target's rows in the source's form (under the names the config gives them there)."""
        schema, names = self.cfg.target_schema(self.table), self.cfg.target_names(self.table)
        cols = [names.column(c) for c in ("id", "note", "amount", "tags")]
        if self.kind == "iceberg":
            t = self.store.iceberg_table(schema, names.table)
            rows = [tuple(r[c] for c in cols) for r in t.scan().to_arrow().select(cols).to_pylist()] if t else []
            return sorted((i, n, None if a is None else str(Decimal(a)), tags) for i, n, a, tags in rows)
        with self.state.cursor() as cur:
            cur.execute(f'SELECT {", ".join(f"{chr(34)}{c}{chr(34)}" for c in cols)} FROM "{schema}"."{names.table}" '
                        f'ORDER BY 1')
            rows = [(i, n, None if a is None else str(a), t) for i, n, a, t in cur.fetchall()]
        self.state.rollback()
        return rows

    def extras(self) -> dict[int, tuple]:
        """Each target row's (deleted, op) from its extra columns (core.table_extras)."""
        schema = self.cfg.target_schema(self.table)
        if self.kind == "iceberg":
            rows = self.store.iceberg_table(schema, self.table).scan().to_arrow().to_pylist()
        else:
            with self.state.cursor() as cur:
                cur.execute(f'SELECT * FROM "{schema}"."{self.table}"')
                rows = [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]
            self.state.rollback()
        return {r["id"]: (r["_tideline_deleted_at"] is not None, r["_tideline_op"]) for r in rows}

    def table_state(self):
        st = state.get(self.state, self.cfg.name, self.table)
        self.state.rollback()
        return st

    # ---------------------------------------------------------------- the load and the stream
    def load(self, offsets: dict[int, int] | None = None, before_snapshot=None):
        """A full load with the handover position `offsets`; `before_snapshot()` runs where Kafka's
        offsets would be read (after the load claimed its epoch, before its snapshot opens)."""
        def handover(topic):
            if before_snapshot is not None:
                before_snapshot()
            return TOPIC_ID, dict(offsets or {0: self.offset})
        loader = FullLoad(self.cfg, self.spark, handover=handover)
        try:
            return loader.load_table(self.table)
        finally:
            loader.close()

    def committer(self):
        """The stream's committer for the table, as a run sets it up (its own epoch)."""
        engine = engines.for_pipeline(self.cfg, get_connection("tideline_source"))
        src = engine.connect(autocommit=True)
        shape = engine.describe(src, "public", self.table, self.cfg.table(self.table), for_stream=True)
        tgt = self.store.connect()
        halts: dict = {}
        epoch = state.claim_epoch(tgt, self.cfg.name, self.table, "contract stream", self.cfg.topic(self.table))
        names = self.cfg.target_names(self.table)
        t = StreamTable(self.table, self.cfg.topic(self.table), epoch, list(names.shape(shape).primary_key),
                        source={c.name: c for c in shape.columns}, names=names)
        committer = BatchCommitter(self.cfg, self.store, engine, "contract stream", {self.table: t},
                                   {t.topic: t}, {}, halts.update)
        with tgt.cursor() as cur:
            t.columns = committer.columns(cur, self.table, t.source)
        tgt.rollback()
        committer.attach(tgt, src)
        return committer, halts

    def batch(self, changes: list[tuple[str, int, dict | None]]):
        """Change records as the connector writes them — (op, id, row image as PostgreSQL text) —
        at the next offsets, decoded and split as the stream does."""
        topic, values, keys = self.cfg.topic(self.table), [], []
        for op, key, after in changes:
            image = None if after is None else {k: None if v is None else str(v) if not isinstance(v, list)
                                                else "{" + ",".join(json.dumps(x) if x is not None else "NULL"
                                                                    for x in v) + "}" for k, v in after.items()}
            keys.append(json.dumps({"id": str(key)}).encode())
            values.append(json.dumps({"before": None, "after": image, "op": op,
                                      "source": {"ts_ms": 1_700_000_000_000}}).encode())
        first, self.offset = self.offset, self.offset + len(changes)
        records = pa.record_batch([pa.array([topic] * len(changes)), pa.array([0] * len(changes), pa.int32()),
                                   pa.array(range(first, self.offset), pa.int64()), pa.array(keys, pa.binary()),
                                   pa.array(values, pa.binary())], names=["topic", "partition", "offset", "key", "value"])
        split = split_batch(decode_records([records]))
        return split.per_partition, split.bad_rows, split.truncates, split.rows

    def change_source(self, sql: str) -> None:
        with self.source_db.cursor() as cur:
            cur.execute(sql)

    # ---------------------------------------------------------------- cleanup
    def close(self) -> None:
        schema = self.cfg.target_schema(self.table)
        self.state.rollback()
        with self.state.cursor() as cur:
            if self.kind == "iceberg":
                catalog = self.store.pyiceberg_catalog()
                if (schema,) in catalog.list_namespaces():
                    for ident in catalog.list_tables(schema):
                        catalog.purge_table(ident)
                    catalog.drop_namespace(schema)
            else:
                cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            for t in ("table_state", "runs", "batches", "dead_letters"):
                cur.execute(f"DELETE FROM tideline.{t} WHERE pipeline = %s", (self.cfg.name,))
        self.state.commit()
        self.state.close()
        with self.source_db.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS public.{self.table}")


@pytest.fixture(params=_kinds())
def contract(request, spark, source_db, unique_name):
    c = Contract(request.param, unique_name, spark, source_db)
    yield c
    c.close()


def test_a_snapshot_goes_live_whole_with_the_state_that_starts_its_stream(contract):
    result = contract.load({0: 7})
    assert result.rows == 4 and contract.target_rows() == contract.source_rows()
    st = contract.table_state()
    assert (st.phase, st.epoch, st.resume_offsets) == ("streaming", result.epoch, {0: 7})
    schema = contract.cfg.target_schema(contract.table)
    assert contract.store.row_count(contract.state, schema, contract.table) == 4
    contract.state.rollback()
    # a reload replaces the rows whole: what the source no longer has is gone
    contract.change_source(f"DELETE FROM public.{contract.table} WHERE id = 2; "
                           f"UPDATE public.{contract.table} SET note = 'again' WHERE id = 1")
    again = contract.load({0: 9})
    assert again.epoch > result.epoch and contract.target_rows() == contract.source_rows()
    assert contract.table_state().resume_offsets == {0: 9}


def test_a_load_that_a_newer_run_fenced_out_publishes_nothing(contract):
    contract.load()
    before = contract.target_rows()
    contract.change_source(f"UPDATE public.{contract.table} SET note = 'not published' WHERE id = 1")

    def newer_run_claims_the_table():
        conn = contract.store.connect()
        try:
            state.claim_epoch(conn, contract.cfg.name, contract.table, "a newer run", contract.cfg.topic(contract.table))
        finally:
            conn.close()
    with pytest.raises(FencedError):
        contract.load(before_snapshot=newer_run_claims_the_table)
    assert contract.target_rows() == before
    runs = state_runs(contract)
    assert runs[-1][0] == "fenced"


def state_runs(contract) -> list[tuple]:
    with contract.state.cursor() as cur:
        cur.execute("SELECT outcome, detail FROM tideline.runs WHERE pipeline = %s ORDER BY run_id", (contract.cfg.name,))
        rows = cur.fetchall()
    contract.state.rollback()
    return rows


@pytest.mark.parametrize("contract", _kinds("stream"), indirect=True)
def test_a_batch_applies_once_with_its_offsets_and_a_replay_adds_nothing(contract):
    contract.load()
    committer, halts = contract.committer()
    changes = [("c", 5, {"id": 5, "note": "new ✓", "amount": "5.00", "tags": ["x", None]}),
               ("u", 1, {"id": 1, "note": "changed", "amount": "1.51", "tags": []}),
               ("d", 3, None),
               ("u", 5, {"id": 5, "note": "newer", "amount": "5.01", "tags": None})]   # the last per key wins
    contract.change_source(f"INSERT INTO public.{contract.table} VALUES (5, 'newer', 5.01, NULL); "
                           f"UPDATE public.{contract.table} SET note = 'changed', amount = 1.51, tags = '{{}}' "
                           f"WHERE id = 1; DELETE FROM public.{contract.table} WHERE id = 3")
    batch = contract.batch(changes)
    try:
        figures = committer.commit_through_outages(1, *batch, NOW)
        assert figures is not None and (figures.upserts, figures.deletes) == (2, 1) and not halts
        assert contract.target_rows() == contract.source_rows()
        assert contract.table_state().resume_offsets == {0: 4}
        # the same batch again (a retry after a lost commit answer, a second copy of the run): nothing
        assert committer.commit_through_outages(2, *batch, NOW) is None
        assert contract.target_rows() == contract.source_rows()
    finally:
        committer.close()


@pytest.mark.parametrize("contract", _kinds("stream"), indirect=True)
def test_a_change_the_target_refuses_is_undone_and_halts_the_table_naming_the_event(contract):
    contract.load()
    before = contract.target_rows()
    committer, halts = contract.committer()
    try:
        batch = contract.batch([("u", 2, {"id": 2, "note": "fine", "amount": "2.00", "tags": None}),
                                ("u", 4, {"id": 4, "note": "bad", "amount": "not a number", "tags": None})])
        committer.commit_through_outages(1, *batch, NOW)
        assert contract.target_rows() == before   # the table's whole share of the batch is undone
        st = contract.table_state()
        assert st.phase == "halted" and contract.table in halts
        why, event = halts[contract.table]
        assert f"{contract.cfg.topic(contract.table)} partition 0 offset 1" in why and "not a number" in why
        assert (event["offset"], event["partition"], event["topic"]) == (1, 0, contract.cfg.topic(contract.table))
    finally:
        committer.close()


@pytest.mark.parametrize("contract", _kinds("stream"), indirect=True)
def test_a_batch_of_a_run_a_newer_one_fenced_out_commits_nothing(contract):
    contract.load()
    before = contract.target_rows()
    committer, _halts = contract.committer()
    try:
        conn = contract.store.connect()
        state.claim_epoch(conn, contract.cfg.name, contract.table, "a newer run", contract.cfg.topic(contract.table))
        conn.close()
        with pytest.raises(FencedError):
            committer.commit_through_outages(1, *contract.batch([("d", 1, None)]), NOW)
        assert contract.target_rows() == before
    finally:
        committer.close()


@pytest.mark.parametrize("contract", _kinds("verifies"), indirect=True)
def test_the_verify_side_finds_equal_tables_equal_and_names_a_row_that_differs(contract):
    from tideline.verify.compare import verify
    contract.load()
    source, target = get_connection("tideline_source"), contract.conn
    [report] = verify(contract.cfg, source, target, [contract.table])
    assert report.equal and (report.source_rows, report.target_rows) == (4, 4)
    # a row changed at the source and not carried: verify finds exactly that key
    contract.change_source(f"UPDATE public.{contract.table} SET amount = 7.77 WHERE id = 4")
    [report] = verify(contract.cfg, source, target, [contract.table])
    assert not report.equal and report.counts["different"] == 1
    assert [(s.kind, s.key) for s in report.samples] == [("different", ("4",))]


def test_the_state_lives_where_the_target_connects_and_a_lost_connection_is_told_from_a_refusal(contract):
    """Every target's state lives in a PostgreSQL database (the state room): migrated, reachable
    through the target's own connect, and a lost connection is told from a refused statement."""
    assert state.migrate(contract.state) >= 1
    contract.state.commit()
    assert contract.store.lost_connection(psycopg2.OperationalError("server closed the connection unexpectedly"))
    assert not contract.store.lost_connection(psycopg2.errors.InvalidTextRepresentation("bad input"))


@pytest.mark.parametrize("kind", _kinds("table_extras"))
def test_soft_deletes_metadata_and_a_row_filter_through_the_load_and_a_batch(kind, spark, source_db, unique_name):
    """deletes: soft, metadata and a row_filter (core.table_extras, core.row_filter), alike on every
    target that has them: the load reads the filter's rows with op r; a batch marks a delete, marks
    a row updated out of the filter, inserts one updated into it — the live rows equal the
    source's filtered rows, and a replay changes nothing."""
    c = Contract(kind, unique_name, spark, source_db, {"deletes": "soft", "metadata": ["op", "source_ts"],
                                                        "row_filter": "amount IS NULL OR amount >= 0"})
    try:
        c.load()
        assert [r[0] for r in c.target_rows()] == [1, 3, 4] and set(c.extras().values()) == {(False, "r")}
        committer, halts = c.committer()
        c.change_source(f"DELETE FROM public.{c.table} WHERE id = 3; UPDATE public.{c.table} SET amount = -5 "
                        f"WHERE id = 1; UPDATE public.{c.table} SET amount = 2 WHERE id = 2")
        batch = c.batch([("d", 3, None),
                         ("u", 1, {"id": 1, "note": "Zoë 😀", "amount": "-5.00", "tags": ["a", None, ""]}),
                         ("u", 2, {"id": 2, "note": "", "amount": "2.00", "tags": []})])
        try:
            assert committer.commit_through_outages(1, *batch, NOW) is not None and not halts
            marks = c.extras()
            assert marks[3] == (True, "d") and marks[1] == (True, "d") and marks[2] == (False, "u")
            live = [r for r in c.target_rows() if not marks[r[0]][0]]
            assert live == [r for r in c.source_rows() if r[2] is None or float(r[2]) >= 0]
            assert committer.commit_through_outages(2, *batch, NOW) is None and c.extras() == marks
        finally:
            committer.close()
    finally:
        c.close()


@pytest.mark.parametrize("kind", _kinds("stream"))
def test_a_table_named_otherwise_in_the_target_loads_streams_and_verifies_under_its_names(kind, spark, source_db,
                                                                                            unique_name):
    """target_name and rename (core.target_names), the key renamed too: the load lands under the
    target's names and records them; a batch (an insert, an update, a delete, an update whose
    large value Debezium left out, filled from the source) applies by the source's field names
    into the target's columns; verify compares each side by its own names and finds a difference."""
    landed = f"{unique_name}_landed"
    c = Contract(kind, unique_name, spark, source_db, {"target_name": landed,
                                                        "rename": {"id": "ident", "note": "remark"}})
    try:
        c.load()
        assert c.target_rows() == c.source_rows()
        schema = c.cfg.target_schema(c.table)
        with c.state.cursor() as cur:
            assert [r[0] for r in c.store.columns(cur, schema, landed)][:4] == ["ident", "remark", "amount", "tags"]
        c.state.rollback()
        assert c.table_state().raw["target_names"] == {"schema": schema, "table": landed,
                                                        "columns": {"id": "ident", "note": "remark"}}
        committer, halts = c.committer()
        c.change_source(f"INSERT INTO public.{c.table} VALUES (5, 'five', 5.00, NULL); "
                        f"UPDATE public.{c.table} SET amount = 0.5 WHERE id = 1; "
                        f"DELETE FROM public.{c.table} WHERE id = 3; "
                        f"UPDATE public.{c.table} SET note = 'not in the event' WHERE id = 2")
        batch = c.batch([("c", 5, {"id": 5, "note": "five", "amount": "5.00", "tags": None}),
                         ("u", 1, {"id": 1, "note": "Zoë 😀", "amount": "0.50", "tags": ["a", None, ""]}),
                         ("d", 3, None),
                         ("u", 2, {"id": 2, "note": "__debezium_unavailable_value", "amount": "-0.01", "tags": []})])
        try:
            figures = committer.commit_through_outages(1, *batch, NOW)
            assert figures is not None and (figures.upserts, figures.deletes) == (3, 1) and not halts
            assert c.target_rows() == c.source_rows()
        finally:
            committer.close()
        if targets.capabilities(c.kind).verifies:
            from tideline.verify.compare import verify
            [report] = verify(c.cfg, get_connection("tideline_source"), c.conn, [c.table])
            assert report.equal and report.target_rows == 4
            c.change_source(f"UPDATE public.{c.table} SET amount = 7.77 WHERE id = 4")
            [report] = verify(c.cfg, get_connection("tideline_source"), c.conn, [c.table])
            assert not report.equal and [(s.kind, s.key) for s in report.samples] == [("different", ("4",))]
    finally:
        c.close()


def test_the_rest_catalog_asks_for_its_oauth2_client_and_a_wrong_secret_is_refused_in_its_words(databases):
    """The stack's REST catalog, as a team's does, issues tokens only to its client: the catalog
    connection's login and password (Iceberg's `credential`) get one, another secret is refused."""
    from dataclasses import replace
    _kind, conn_id, state_conn_id = CONFIGURATIONS["iceberg-rest-s3"]
    conn, state_conn = get_connection(conn_id), get_connection(state_conn_id)
    assert conn.login and conn.password, "the stack's REST catalog connection carries its OAuth2 client"
    assert isinstance(targets.for_connection(conn, state_conn).pyiceberg_catalog().list_namespaces(), list)
    wrong = targets.for_connection(replace(conn, password="not-the-secret"), state_conn)
    with pytest.raises(Exception, match="invalid_client"):
        wrong.pyiceberg_catalog().list_namespaces()
