"""hash_columns against the real stack: the target holds salted SHA-256 of each hashed value,
byte-for-byte the digest Python's hashlib gives for salt + value (so the source's SQL, the stream's
decode and the change log agree), through the full load, the stream (a large out-of-line value
Debezium leaves out included), verify and repair; from PostgreSQL and MariaDB, into PostgreSQL and
Iceberg; and a changed salt reloads the table by itself instead of mixing two hashes."""
from __future__ import annotations

import json

import pytest

from helpers import drop_source, stream_until
from test_mariadb import maria  # noqa: F401  (the MariaDB source fixture)
from tideline import state
from tideline.core.column_hash import python_hash
from tideline.core.errors import ResnapshotRequired
from tideline.load.full_load import FullLoad
from tideline.stream.run import IncrementalRun
from tideline.verify import command as compare

pytestmark = pytest.mark.integration
SALT = "pe'pp\\er ✓ 😀"   # a quote, a backslash and characters beyond Latin-1
BIG = "x" * 9000 + "@big.example"   # stored out of line (TOAST): an update of another column leaves it out


@pytest.fixture
def salt(monkeypatch):
    """The salt kept as an Airflow connection's password (AIRFLOW_CONN_*, as the jobs get it)."""
    def use(value: str) -> str:
        monkeypatch.setenv("AIRFLOW_CONN_TIDELINE_SALT", json.dumps({"conn_type": "generic", "password": value}))
        return value
    return use


def _rows(conn, query: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(query)
        return cur.fetchall()


def expected(source_rows: list[tuple], salt_value: str) -> list[tuple]:
    """(id, email hashed, name hashed, note) from the source's (id, email, name, note)."""
    return [(i, python_hash(salt_value, e), python_hash(salt_value, n), note) for i, e, n, note in source_rows]


def test_hashed_columns_hold_the_same_digest_through_load_stream_log_verify_and_repair(
        spark, source_db, target_db, pipelines, unique_name, salt):
    s = salt(SALT)
    t = f"{unique_name}_people"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, email text, name varchar(40), note text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, CASE g % 5 WHEN 0 THEN NULL WHEN 1 THEN '' "
                    f"ELSE 'user' || g || '@example.com' END, CASE WHEN g % 3 = 0 THEN 'Zoë 😀 ' || g "
                    f"ELSE 'O''Brien\\' || g END, 'note ' || g FROM generate_series(1, 300) g")
        cur.execute(f"UPDATE public.{t} SET email = %s WHERE id = 7", (BIG,))
    select = f"SELECT id, email, name, note FROM {{}}.{t} ORDER BY id"
    try:
        cfg = pipelines.make([{"name": t, "hash_columns": ["email", "name"], "changelog": True}], capture=True,
                             hash_salt={"conn_id": "tideline_salt"})
        schema = cfg.target_schema(t)
        FullLoad(cfg, spark).run([t])
        assert _rows(target_db, select.format(schema)) == expected(_rows(source_db, select.format("public")), s)
        assert _rows(target_db, f"SELECT data_type FROM information_schema.columns WHERE table_schema = "
                                f"'{schema}' AND table_name = '{t}' AND column_name = 'name'") == [("text",)]

        with source_db.cursor() as cur:   # every kind of change, and one that leaves the large value out
            cur.execute(f"UPDATE public.{t} SET email = 'new' || id || '@example.com ✓' WHERE id <= 10 AND id <> 7")
            cur.execute(f"UPDATE public.{t} SET note = 'touched' WHERE id = 7")
            cur.execute(f"UPDATE public.{t} SET name = NULL WHERE id = 12")
            cur.execute(f"DELETE FROM public.{t} WHERE id BETWEEN 200 AND 209")
            cur.execute(f"INSERT INTO public.{t} VALUES (1001, 'a@b.c', '', 'inserted')")
        stream_until(cfg, spark, lambda: _rows(target_db, select.format(schema)) == expected(
            _rows(source_db, select.format("public")), s), "the hashed rows to equal the source's digests")
        assert _rows(target_db, f"SELECT email FROM {schema}.{t} WHERE id = 7") == [(python_hash(s, BIG),)]

        # the change log's images hold hashes too, never the values
        log = _rows(target_db, f"SELECT after->>'email', before->>'name', after::text FROM {schema}.{t}__changes "
                               f"WHERE key->>'id' = '1001' OR (key->>'id')::int <= 12 ORDER BY _tideline_offset")
        assert log and all(image is None or ("@example.com" not in image and "@b.c" not in image)
                           for *_v, image in log)
        assert (python_hash(s, "a@b.c"), None) in [(a, b) for a, b, _ in log]

        args = ["--pipeline", cfg.name, "--tables", t, "--pipelines-dir", str(pipelines.dir)]
        assert compare.main(args) == 0   # the source's values hashed there, against the stored digests
        with target_db.cursor() as cur:
            cur.execute(f"UPDATE {schema}.{t} SET email = %s WHERE id = 42", (python_hash("another salt", "x"),))
        assert compare.main(args) != 0
        from tideline.core.connections import get_connection
        from tideline.verify.repair import repair
        repair(cfg, get_connection(cfg.source.conn_id), get_connection(cfg.target.conn_id), t, key_from="40",
               key_to="45")
        assert _rows(target_db, select.format(schema)) == expected(_rows(source_db, select.format("public")), s)
        assert compare.main(args) == 0

        # a new salt: the target's digests are of the old one, so the stream reloads the table instead
        s2 = salt(SALT + " rotated")
        with pytest.raises(ResnapshotRequired, match="the salt of email, name changed"):
            IncrementalRun(cfg, spark, "available_now").run()
        assert state.get(target_db, cfg.name, t).phase == "needs_resnapshot"
        target_db.rollback()
        FullLoad(cfg, spark).run([t])
        assert _rows(target_db, select.format(schema)) == expected(_rows(source_db, select.format("public")), s2)
        stream_until(cfg, spark, lambda: True, "a stream to start on the reloaded table")
    finally:
        drop_source(source_db, t)


def test_hashed_columns_from_mariadb_hash_the_utf8_text_whatever_the_column_charset(
        spark, target_db, pipelines, unique_name, salt, maria):   # noqa: F811 — the fixture
    from test_mariadb import _drop, _exec, mariadb_pipeline
    s = salt(SALT)
    t = f"{unique_name}_mh"
    _exec(maria, f"CREATE TABLE {t} (id int PRIMARY KEY, email varchar(100) CHARACTER SET utf8mb4, "
                 f"name varchar(40) CHARACTER SET latin1, note text)",
          f"INSERT INTO {t} SELECT seq, IF(seq % 4 = 0, NULL, CONCAT('u', seq, '@m.example 😀')), "
          f"CONCAT('Café ', seq), CONCAT('note ', seq) FROM seq_1_to_100")
    try:
        cfg = mariadb_pipeline(pipelines, [{"name": t, "hash_columns": ["email", "name"]}], capture=True,
                               hash_salt={"conn_id": "tideline_salt"})
        schema = cfg.target_schema(t)
        FullLoad(cfg, spark).run([t])
        _exec(maria, f"UPDATE {t} SET email = 'changed@m.example', name = 'Ça va' WHERE id <= 5",
              f"DELETE FROM {t} WHERE id > 95", f"INSERT INTO {t} VALUES (500, NULL, 'Ünï', 'x')")

        def source() -> list[tuple]:
            with maria.cursor() as cur:
                cur.execute(f"SELECT id, email, name, note FROM {t} ORDER BY id")
                return [tuple(r) for r in cur.fetchall()]
        select = f"SELECT id, email, name, note FROM {schema}.{t} ORDER BY id"
        stream_until(cfg, spark, lambda: _rows(target_db, select) == expected(source(), s),
                     "the hashed rows to equal the MariaDB rows' digests")
        assert compare.main(["--pipeline", cfg.name, "--tables", t, "--pipelines-dir", str(pipelines.dir)]) == 0
    finally:
        _drop(maria, t)


def test_hashed_columns_in_iceberg_read_with_pyiceberg(spark, source_db, pipelines, unique_name, lake, salt):
    from test_iceberg import iceberg_pipeline
    s = salt(SALT)
    t = f"{unique_name}_lh"
    with source_db.cursor() as cur:
        cur.execute(f"CREATE TABLE public.{t} (id int PRIMARY KEY, email text, name varchar(40), note text)")
        cur.execute(f"INSERT INTO public.{t} SELECT g, CASE WHEN g % 4 = 0 THEN NULL ELSE 'l' || g || '@x.example' "
                    f"END, 'Zoë ' || g, 'n' || g FROM generate_series(1, 120) g")
    try:
        cfg = iceberg_pipeline(pipelines, unique_name, [{"name": t, "hash_columns": ["email", "name"]}],
                               capture=True, hash_salt={"conn_id": "tideline_salt"})
        FullLoad(cfg, spark).run([t])
        with source_db.cursor() as cur:
            cur.execute(f"UPDATE public.{t} SET email = 'moved@x.example' WHERE id <= 3")
            cur.execute(f"DELETE FROM public.{t} WHERE id > 110")

        def lake_rows() -> list[tuple]:
            rows = lake.pyiceberg_catalog().load_table((unique_name, t)).scan().to_arrow().to_pylist()
            return sorted((r["id"], r["email"], r["name"], r["note"]) for r in rows)
        select = f"SELECT id, email, name, note FROM public.{t} ORDER BY id"
        stream_until(cfg, spark, lambda: lake_rows() == expected(_rows(source_db, select), s),
                     "the Iceberg rows to equal the source's digests")
        assert compare.main(["--pipeline", cfg.name, "--tables", t, "--pipelines-dir", str(pipelines.dir)]) == 0
    finally:
        drop_source(source_db, t)
