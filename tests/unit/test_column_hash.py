"""hash_columns (core.column_hash): what the config accepts and refuses, the shape a hashed table
is read with (text, the salt never shown), and the SQL each path hashes with. That the SQL of
PostgreSQL and MariaDB gives python_hash's digest for the same text is checked on the real servers
(tests/integration/test_hashed_columns.py)."""
import pytest
from psycopg2 import sql

from tideline.core import apply_sql, column_hash
from tideline.core.config import parse_pipeline
from tideline.core.errors import ConfigError, SourceError
from tideline.core.table_shape import Column, TableShape, read_query

BASE = {"name": "shop", "source": {"conn_id": "src", "schema": "public"}, "target": {"conn_id": "tgt"},
        "kafka": {"topic_prefix": "tl.shop"}, "hash_salt": {"conn_id": "tideline_salt"}}
SALT = "pepper 'n' \\ salt ✓"
SHAPE = TableShape("public", "people", (Column("id", "integer", True), Column("email", "character varying(200)", False),
                                        Column("born", "date", False)), ("id",))


def cfg(*tables, **top):
    return parse_pipeline({**BASE, **top, "tables": list(tables)}, "shop.yaml")


def test_a_table_names_its_hashed_columns_and_each_table_knows_where_the_salt_is():
    c = cfg({"name": "people", "hash_columns": ["email"]}, {"name": "orders"})
    assert c.table("people").hash_columns == ["email"]
    assert c.table("people")._hash_salt_conn == "tideline_salt"
    assert "tideline_salt" in c.job_conn_ids   # handed to the Spark jobs like every connection


@pytest.mark.parametrize("table, top, says", [
    ({"name": "p", "hash_columns": ["email"]}, {"hash_salt": None}, "has no hash_salt"),
    ({"name": "p", "hash_columns": ["email", "email"]}, {}, "lists a column twice"),
    ({"name": "p", "primary_key": ["id"], "hash_columns": ["id"]}, {}, "a key column"),
    ({"name": "p", "mode": "batch", "cursor_column": "at", "hash_columns": ["email"]}, {}, "go with mode: cdc"),
    ({"name": "p", "row_filter": "email <> ''", "hash_columns": ["email"]}, {}, "named in row_filter"),
    ({"name": "p", "exclude_columns": ["email"], "hash_columns": ["email"]}, {}, "does not sync"),
    ({"name": "p", "columns": ["name"], "hash_columns": ["email"]}, {}, "does not sync"),
])
def test_what_cannot_be_hashed_alike_everywhere_is_refused_naming_the_table(table, top, says):
    with pytest.raises(ConfigError) as err:
        cfg(table, **top)
    assert says in str(err.value) and "'p'" in str(err.value)


def test_the_hashed_shape_holds_text_and_never_shows_the_salt():
    shape = column_hash.hashed_shape(SHAPE, ["email"], SALT, "shop.people")
    email = shape.column("email")
    assert email.type == "text" and email.hash_salt == SALT and not email.binary_copy
    assert SALT not in repr(shape) and shape.column("born") == SHAPE.column("born")
    assert shape == SHAPE.__class__(SHAPE.schema, SHAPE.name, shape.columns, SHAPE.primary_key)


@pytest.mark.parametrize("columns, says", [
    (["born"], "of type date; only text columns"), (["id"], "a key column"), (["nope"], "does not sync")])
def test_a_column_the_source_gives_that_cannot_be_hashed_is_refused_naming_it(columns, says):
    with pytest.raises(SourceError) as err:
        column_hash.hashed_shape(SHAPE, columns, SALT, "shop.people")
    assert says in str(err.value) and "shop.people" in str(err.value)


def test_without_a_salt_a_hashed_table_does_not_read():
    with pytest.raises(ConfigError, match="hash_salt"):
        column_hash.hashed_shape(SHAPE, ["email"], None, "shop.people")


def test_the_salt_travels_as_hex_bytes_so_no_quote_or_backslash_can_break_the_sql():
    hexed = SALT.encode("utf-8").hex()
    assert column_hash.pg_text('t."email"', SALT) == (
        f"encode(sha256(decode('{hexed}', 'hex') || convert_to((t.\"email\")::text, 'UTF8')), 'hex')")
    assert column_hash.mariadb_sql("`email`", column_hash.mariadb_literal(SALT)) == (
        f"SHA2(CONVERT(CONCAT(CONVERT(X'{hexed}' USING utf8mb4), `email`) USING utf8mb4), 256)")
    assert column_hash.python_hash("s", "a") == "4cf6829aa93728e8f3c97df913fb1bfa95fe5810e2933a05943f8312a98d9cf2"  # printf sa | sha256sum
    assert column_hash.python_hash("s", None) is None


def test_a_mariadb_column_reads_and_fingerprints_through_its_hash():
    shape = TableShape("shop", "people", (Column("id", "integer", True, read="`id`", canon="`id`"),
                                          Column("email", "character varying(200)", False, encoding="text",
                                                 read="`email`", canon="`email`")), ("id",))
    email = column_hash.hashed_shape(shape, ["email"], "s", "shop.people").column("email")
    assert email.read == email.canon == column_hash.mariadb_sql("`email`", column_hash.mariadb_literal("s"))
    assert email.encoding == "text"   # the stream decodes the event as before, then hashes


def _text(composed) -> str:
    """Composed SQL as text without a server (identifiers quoted, literals as psycopg2 would)."""
    if isinstance(composed, sql.Composed):
        return "".join(_text(part) for part in composed)
    if isinstance(composed, sql.Identifier):
        return ".".join('"' + s + '"' for s in composed.strings)
    if isinstance(composed, sql.Literal):
        return repr(composed.wrapped)
    return composed.string


def test_the_load_the_stream_and_the_change_log_hash_the_same_column():
    shape = column_hash.hashed_shape(SHAPE, ["email"], "s", "shop.people")
    hashed = "encode(sha256(decode('73', 'hex') || convert_to(("
    assert hashed + '"t"."email")::text' in _text(read_query(shape))          # the load, batch reads
    assert 't."born"::text AS "born"' in _text(read_query(shape))
    assert hashed + "(s.\"after\"->>'email')::text)::text" in _text(apply_sql.row_value(shape.column("email")))
    assert "sha256" not in _text(apply_sql.row_value(shape.column("born")))
    log = _text(apply_sql.hash_log_images_sql("people", list(shape.columns)))
    assert log.count("jsonb_set") == 2 and "__debezium_unavailable_value" in log   # before and after
    assert apply_sql.hash_log_images_sql("people", list(SHAPE.columns)) is None


def test_a_chunked_load_cut_off_does_not_resume_once_hashing_or_its_salt_changed():
    from tideline.core.chunked_load import shape_digest
    plain, hashed = SHAPE, column_hash.hashed_shape(SHAPE, ["email"], "s", "shop.people")
    resalted = column_hash.hashed_shape(SHAPE, ["email"], "t", "shop.people")
    assert len({shape_digest(plain), shape_digest(hashed), shape_digest(resalted)}) == 3
    assert shape_digest(hashed) == shape_digest(column_hash.hashed_shape(SHAPE, ["email"], "s", "shop.people"))


def test_a_stream_finds_hashing_changed_since_the_load_and_says_what_changed():
    hashed = column_hash.hashed_shape(SHAPE, ["email"], "s", "shop.people")
    loaded = column_hash.hashed_columns(hashed)
    assert list(loaded) == ["email"] and len(loaded["email"]) == 12   # an id of the salt, never the salt
    assert column_hash.changed_since_load(hashed, loaded, "shop.people") is None
    assert column_hash.changed_since_load(SHAPE, None, "shop.people") is None          # older loads: none
    assert "hash_columns added email" in column_hash.changed_since_load(hashed, None, "shop.people")
    assert "hash_columns dropped email" in column_hash.changed_since_load(SHAPE, loaded, "shop.people")
    resalted = column_hash.hashed_shape(SHAPE, ["email"], "t", "shop.people")
    assert "the salt of email changed" in column_hash.changed_since_load(resalted, loaded, "shop.people")
