"""Names: what can name a schema, table or column (as the database spells it), a pipeline, a topic
prefix — and the topic Debezium gives a table. Pure."""
from __future__ import annotations

import re

PIPELINE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
TOPIC_PREFIX = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


def name_problem(value: object) -> str | None:
    """Why `value` cannot name a schema, table or column, or None. Names are written as the
    database spells them (case, spaces, unicode, reserved words) and quoted wherever Tideline
    writes SQL; what no quoting makes safe everywhere — in SQL, in Debezium's comma-separated
    table list — is refused."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty name"
    if len(value.encode()) > 63:
        return "is longer than 63 bytes (PostgreSQL would cut it)"
    bad = [c for c in ('"', ",", "\x00") if c in value]
    if bad:
        return f"contains {', '.join(repr(c) for c in bad)}, which Tideline cannot carry in a name: rename it"
    return None


def identifier(value: str, what: str) -> str:
    problem = name_problem(value)
    if problem:
        raise ValueError(f"{what} {value!r} {problem}")
    return value


def topic_name(prefix: str, schema: str, table: str) -> str:
    """Debezium's topic for a source table: <prefix>.<schema>.<table>, each character a topic name
    cannot hold (outside [A-Za-z0-9._-], counted in UTF-16 units as Java does) turned into '_',
    cut at 249 characters — as its topic naming strategy does."""
    out = []
    for ch in f"{prefix}.{schema}.{table}":
        if ch.isascii() and (ch.isalnum() or ch in "._-"):
            out.append(ch)
        else:
            out.append("_" * (2 if ord(ch) > 0xFFFF else 1))
    return "".join(out)[:249]
