"""One table of a pipeline's config (`tables:` in `pipelines/<name>.yaml`): what it syncs and how it
lands. Validated alone here; what needs the whole pipeline (other tables, the target's kind) is
core.config's, what needs the source's catalog is checked when the table is described.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from tideline.core.names import identifier
from tideline.core.settings import _Model


class TableConfig(_Model):
    name: str = Field(description="the source table, as the database spells it")
    schema_: str | None = Field(default=None, alias="schema",
                                description="the table's source schema (MariaDB: database); default source.schema")
    target_schema: str | None = Field(default=None, description="the target schema it lands in; default "
                                                                "target.schema")
    target_name: str | None = Field(default=None, description="the target table's name; default the source table's "
                                                              "(Tideline's state, params and alerts keep the source's)")
    rename: dict[str, str] = Field(default_factory=dict, description="source column -> the name the target table "
                                                                     "gives it (every other option names the source's "
                                                                     "columns)")
    primary_key: list[str] | None = Field(
        default=None, description="key columns; omitted = read from the source catalog")
    columns: list[str] | None = Field(default=None, description="sync only these columns, plus the key "
                                                                "(default: all)")
    exclude_columns: list[str] = Field(default_factory=list, description="never sync these columns")
    mode: Literal["cdc", "batch"] = Field(default="cdc", description="`cdc`: full load, then the change stream "
                                                                     "through Debezium; `batch`: the batch_<name> DAG copies "
                                                                     "rows by cursor_column per data interval")
    snapshot: Literal["auto", "chunked", "consistent"] = Field(
        default="auto", description="how its full load reads the source: `chunked` = key-range chunks, each in its "
                                    "own short transaction, resumable; `consistent` = one snapshot held for the "
                                    "whole read; `auto` = chunked from 10,000,000 rows (the source's estimate)")
    # at ~290k rows/s a chunk's transaction lasts ~1-2 s; a resumed load re-reads at most the
    # chunks that were being read when it was cut off
    chunk_rows: int = Field(default=250_000, ge=1, description="rows per chunk of a chunked load")
    deletes: Literal["hard", "soft"] = Field(
        default="hard", description="`hard`: a delete at the source deletes the target row; `soft`: the row stays "
                                    "with its last values and `_tideline_deleted_at` set to the source's delete "
                                    "time (a key inserted again clears it). Change-stream tables only")
    metadata: list[Literal["synced_at", "op", "source_ts", "source_position"]] = Field(
        default_factory=list, description="change metadata columns added to the target table: `_tideline_synced_at` "
                                          "(target commit time), `_tideline_op` (c/u/d, r for loaded rows), "
                                          "`_tideline_source_ts` (source commit time), `_tideline_source_position` "
                                          "(source log position and Kafka partition:offset). Change-stream tables only")
    history: bool = Field(
        default=False, description="SCD type 2: one row per version with `_tideline_valid_from`, `_tideline_valid_to` "
                                   "and `_tideline_current`, keyed by the source key and `_tideline_valid_from`; "
                                   "versions from the source's commit times (from MariaDB in GTID order, to the "
                                   "second, with `_tideline_source_order`); a delete closes the current version. "
                                   "Loads from one consistent snapshot. Change-stream tables only")
    changelog: bool = Field(
        default=False, description="keep an append-only `<table>__changes` beside the table: every change event "
                                   "(op, key, before and after image, source time and position, Kafka partition "
                                   "and offset), each exactly once. Change-stream tables only")
    row_filter: str | None = Field(
        default=None, description="only the rows this SQL predicate over the source's columns holds for, written in "
                                  "the source's SQL (e.g. `status <> 'test'`): the full load reads by it and the "
                                  "stream applies it alike — a row updated out of it leaves the target, one updated "
                                  "into it arrives. Change-stream tables only; on the row's own values (no clock)")
    partition_by: list[str] = Field(
        default_factory=list, description="Iceberg targets: the table's partition transforms — a column (identity), "
                                          "`year(c)`, `month(c)`, `day(c)`, `hour(c)`, `bucket(N, c)`, `truncate(N, c)`")
    hash_columns: list[str] = Field(
        default_factory=list, description="text columns the target holds only as salted SHA-256 (lower-case hex of "
                                          "salt + value), alike in the load and the stream; the salt is the "
                                          "pipeline's hash_salt. Change-stream tables; not key or row_filter columns")
    _hash_salt_conn: str | None = PrivateAttr(default=None)   # the pipeline's hash_salt.conn_id (PipelineConfig)
    cursor_column: str | None = Field(default=None, description="batch mode: a monotonic id or update-time column")
    safety_lag_s: int = Field(default=300, ge=0, description="batch mode: how far behind now an interval ends, in s")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return identifier(v, "table name")

    @field_validator("schema_", "target_schema")
    @classmethod
    def _schemas(cls, v: str | None) -> str | None:
        return v if v is None else identifier(v, "schema")

    @field_validator("target_name")
    @classmethod
    def _target_name(cls, v: str | None) -> str | None:
        return v if v is None else identifier(v, "target_name")

    @field_validator("rename")
    @classmethod
    def _rename(cls, v: dict[str, str]) -> dict[str, str]:
        from tideline.core.target_names import check_rename
        return check_rename(v)

    @field_validator("primary_key")
    @classmethod
    def _pk(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("must list at least one column, or be omitted to use the source's primary key")
        if len(set(v)) != len(v):
            raise ValueError(f"lists a column twice: {v}")
        return [identifier(c, "primary key column") for c in v]

    @field_validator("partition_by")
    @classmethod
    def _partitions(cls, v: list[str]) -> list[str]:
        from tideline.core import lake_partition
        lake_partition.check([lake_partition.parse(t) for t in v])
        return v

    @field_validator("columns", "exclude_columns")
    @classmethod
    def _column_names(cls, v):
        return v if v is None else [identifier(c, "column") for c in v]

    @model_validator(mode="after")
    def _batch_needs_cursor(self) -> "TableConfig":
        if self.columns is not None and self.exclude_columns:
            raise ValueError(f"table {self.name!r}: give columns (include) or exclude_columns, not both")
        for key in self.primary_key or []:
            if key in self.exclude_columns:
                raise ValueError(f"table {self.name!r}: primary key column {key!r} must be synced")
        if len(set(self.metadata)) != len(self.metadata):
            raise ValueError(f"table {self.name!r}: metadata lists a column twice: {self.metadata}")
        if self.history and self.deletes == "soft":
            raise ValueError(f"table {self.name!r}: history keeps every version (a delete closes the current one): "
                             f"drop deletes: soft")
        if self.history and self.snapshot == "chunked":
            raise ValueError(f"table {self.name!r}: a history table loads from one consistent snapshot (its first "
                             f"versions start at one point in time): drop snapshot: chunked")
        if self.mode == "batch" and (self.deletes == "soft" or self.metadata or self.history or self.changelog):
            raise ValueError(f"table {self.name!r} is in batch mode, which copies rows by cursor_column and never "
                             f"sees a delete or a change's source position: deletes: soft, history, changelog and "
                             f"metadata go with mode: cdc")
        from tideline.core.lake_partition import parse
        for f in map(parse, self.partition_by):
            if f.column in self.exclude_columns or (self.columns is not None and f.column not in self.columns
                                                    and f.column not in (self.primary_key or [])):
                raise ValueError(f"table {self.name!r}: partition_by {f.text} names column {f.column!r}, which the "
                                 f"table does not sync (columns / exclude_columns)")
        from tideline.core.table_extras import TableExtras
        from tideline.core.target_names import check_renamed_columns
        check_renamed_columns(self)
        clash = TableExtras.of(self).collisions(list(self.columns or []) + list(self.primary_key or []))
        if clash:
            raise ValueError(f"table {self.name!r}: {', '.join(clash)} is a source column and also a column "
                             f"Tideline adds (deletes: soft / metadata): drop that option, or rename the source column")
        if self.mode == "batch" and not self.cursor_column:
            raise ValueError(f"table {self.name!r} is in batch mode and needs cursor_column "
                             f"(a monotonic id or update-time column)")
        if self.cursor_column:
            identifier(self.cursor_column, "cursor_column")
        return self
