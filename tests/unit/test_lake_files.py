"""The pure parts of an Iceberg load written as data files (pipes.lake_files, targets.iceberg.files):
COPY's CSV parsed into each Iceberg type exactly, refused values named with their key, the field
ids a replacement gives, and which tables Spark keeps."""
from __future__ import annotations

import decimal
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tideline.core import lake_types
from tideline.core.errors import RefusedValue
from tideline.core.table_extras import TableExtras
from tideline.pipes import lake_files
from tideline.pipes.lake_files import FileColumn, LakeFiles
from tideline.targets.iceberg.files import field_ids, files_refusal, parquet_options, schema_json

COLUMNS = [FileColumn("id", "long", 1), FileColumn("s", "string", 2), FileColumn("f", "double", 3),
           FileColumn("r", "float", 4), FileColumn("n", "decimal(12,2)", 5, True, "t: column n holds NaN at key \x00; do"),
           FileColumn("d", "date", 6), FileColumn("ts", "timestamptz", 7), FileColumn("t", "timestamp", 8),
           FileColumn("b", "boolean", 9), FileColumn("by", "binary", 10), FileColumn("i", "int", 11)]


def lake(columns=COLUMNS, data_dir="file:///tmp/x") -> LakeFiles:
    return LakeFiles(None, "p.t", "t", columns, ["id"], data_dir, "abc", {"compression": "zstd"})


def test_copy_csv_parses_into_each_type_exactly_and_only_an_unquoted_empty_field_is_null():
    # as COPY ... (FORMAT csv) prints them: n's flag before n; NULL unquoted empty, '' quoted
    rows = (b'1,NULL,Infinity,-0,f,123.45,-2440588,-210866803200000000,0,t,\\x00ff,-2147483648\n'
            b'2,"",NaN,1.401298e-45,f,,0,9223371331200000000,-1,f,\\x,2147483647\n'
            b'3,"a,b""c\nline\r\nbreak",-1.5,3.4028235e+38,f,-0.01,2932896,1,1,,,\n'
            b'4,,5e-324,NaN,f,9999999999.99,,,,,,\n')
    table = lake().table_of(pa.py_buffer(rows))
    assert table.column("s").to_pylist() == ["NULL", "", 'a,b"c\nline\r\nbreak', None]
    f = table.column("f").to_pylist()
    assert f[0] == float("inf") and f[1] != f[1] and f[2] == -1.5 and f[3] == 5e-324
    r = table.column("r")
    assert r.type == pa.float32() and str(r[0].as_py()) == "-0.0" and r[3].as_py() != r[3].as_py()
    assert table.column("n").to_pylist() == [decimal.Decimal("123.45"), None, decimal.Decimal("-0.01"),
                                              decimal.Decimal("9999999999.99")]
    assert table.column("d").type == pa.date32() and table.column("d").cast(pa.int32()).to_pylist()[:3] == \
        [-2440588, 0, 2932896]   # 4714-11-24 BC and 5874897-12-31 as days since 1970
    assert table.column("ts").type == pa.timestamp("us", tz="UTC")
    assert table.column("ts").cast(pa.int64()).to_pylist()[:3] == [-210866803200000000, 9223371331200000000, 1]
    assert table.column("t").type == pa.timestamp("us")
    assert table.column("b").to_pylist() == [True, False, None, None]
    assert table.column("by").to_pylist() == [b"\x00\xff", b"", None, None]
    assert table.column("i").type == pa.int32() and table.column("i").to_pylist() == [-2147483648, 2147483647,
                                                                                    None, None]
    assert [f.metadata[b"PARQUET:field_id"] for f in table.schema] == [str(i).encode() for i in range(1, 12)]
    assert "n" in table.column_names and not any(c.startswith("__tl_bad") for c in table.column_names)


def test_a_flagged_value_is_refused_naming_its_column_and_key():
    rows = b'7,x,1,1,f,1.00,0,0,0,t,\\x,1\n8,y,1,1,t,,0,0,0,t,\\x,1\n'
    with pytest.raises(RefusedValue, match=r"t: column n holds NaN at key id=8; do"):
        lake().table_of(pa.py_buffer(rows))


def test_rows_are_gathered_into_whole_blocks_and_written_as_row_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(lake_files, "TEXT_BLOCK", 64)
    monkeypatch.setattr(lake_files, "ROW_GROUP_ROWS", 10)
    columns = [FileColumn("id", "long", 1), FileColumn("s", "string", 2)]
    rows = [f'{i},"row {i}\nsecond line"\n'.encode() for i in range(100)]

    class Source:
        def copy_out(self, sql, sink):
            for row in rows:
                sink.write(row)
            return len(rows)

    files = LakeFiles(Source(), "p.t", "t", columns, ["id"], f"file://{tmp_path}", "abc", {"compression": "zstd"})
    [figures] = list(files.copier("here")([(3, "COPY ...")]))
    assert figures["rows"] == figures["copied"] == 100
    [(uri, n, size)] = figures["files"]
    assert uri == f"file://{tmp_path}/tl-load-abc-00003-000.parquet" and n == 100 and size > 0
    written = pq.ParquetFile(uri[len("file://"):])
    assert written.metadata.num_row_groups >= 9 and written.read().column("id").to_pylist() == list(range(100))
    assert written.schema_arrow.field("s").metadata[b"PARQUET:field_id"] == b"2"


def test_a_failed_partition_removes_its_files(tmp_path):
    columns = [FileColumn("id", "long", 1)]

    class Source:
        def copy_out(self, sql, sink):
            sink.write(b"1\n")
            sink.flush()
            raise RuntimeError("the source went away")

    files = LakeFiles(Source(), "p.t", "t", columns, ["id"], f"file://{tmp_path}", "abc", {})
    with pytest.raises(RuntimeError, match="went away"):
        list(files.copier()([(0, "COPY ...")]))
    assert list(tmp_path.iterdir()) == []


def test_field_ids_follow_a_replacement_of_the_table():
    assert field_ids(None, ["a", "b"]) == {"a": 1, "b": 2}
    current = SimpleNamespace(schema=lambda: SimpleNamespace(fields=[SimpleNamespace(name="a", field_id=1),
                                                                      SimpleNamespace(name="gone", field_id=2)]),
                              metadata=SimpleNamespace(last_column_id=3))
    assert field_ids(current, ["a", "new", "b"]) == {"a": 1, "new": 4, "b": 5}
    assert '"type": "decimal(12, 2)"' in schema_json([lake_types.LakeColumn("n", "decimal(12,2)", "{v}", "{c}")],
                                                      {"n": 7})


def test_parquet_settings_follow_the_table_properties():
    assert parquet_options({}) == {"compression": "zstd", "compression_level": 3}
    assert parquet_options({"write.parquet.compression-codec": "snappy"}) == {"compression": "snappy"}
    assert parquet_options({"write.parquet.compression-level": "1"}) == {"compression": "zstd", "compression_level": 1}
    assert parquet_options({"write.parquet.compression-codec": "uncompressed"}) == {"compression": "none"}


def test_spark_keeps_what_only_its_writer_does():
    pg, maria = SimpleNamespace(reads_csv=True, label="PostgreSQL"), SimpleNamespace(reads_csv=False, label="MariaDB")
    plain = [lake_types.LakeColumn("id", "long", "{v}", "{c}")]
    assert files_refusal(pg, plain, TableExtras(), (), False) is None
    assert "JDBC" in files_refusal(maria, plain, TableExtras(), (), False)
    assert "partitioned" in files_refusal(pg, plain, TableExtras(), ("day(ts)",), False)
    assert "extra columns" in files_refusal(pg, plain, TableExtras(), (), True)
    lists = plain + [lake_types.LakeColumn("tags", "list<string>", "{v}", "{c}")]
    assert "tags" in files_refusal(pg, lists, TableExtras(), (), False)


def test_a_failed_load_removes_the_files_its_other_partitions_wrote(tmp_path):
    from tideline.targets.iceberg.files import FileLoad
    columns = [FileColumn("id", "long", 1)]

    class Source:
        def copy_out(self, sql, sink):
            if sql == "bad":
                raise RuntimeError("the source went away")
            sink.write(b"1\n")
            return 1

    files = LakeFiles(Source(), "p.t", "t", columns, ["id"], f"file://{tmp_path}", "abc", {})
    (tmp_path / "tl-load-other-00000-000.parquet").write_bytes(b"another load's")

    def spread(items, copier_for, in_threads=False):   # partitions one after another, as the driver's streams
        return [f for item in items for f in copier_for("")([item])]

    load = FileLoad.__new__(FileLoad)
    load.files, load.label, load.shape = files, "p.t", SimpleNamespace(name="t")
    with pytest.raises(RuntimeError, match="went away"):
        load.write(spread, [(0, "good"), (1, "bad")])
    assert [p.name for p in tmp_path.iterdir()] == ["tl-load-other-00000-000.parquet"]
