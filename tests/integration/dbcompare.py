"""Exact comparison of tables between source and target, done inside PostgreSQL."""


def rows_as_text(conn, schema: str, table: str, order_by: str = "1") -> list[str]:
    """Every row as PostgreSQL's own text form, in a stable order: the exact-equality oracle."""
    with conn.cursor() as cur:
        cur.execute(f'SELECT t::text FROM "{schema}"."{table}" t ORDER BY {order_by}')
        return [r[0] for r in cur.fetchall()]


def table_digest(conn, schema: str, table: str, order_by: str) -> tuple[int, str]:
    """(row count, md5 of all rows in key order) for large tables."""
    with conn.cursor() as cur:
        cur.execute(f'SELECT count(*), md5(coalesce(string_agg(t::text, E\'\\n\' ORDER BY {order_by}), \'\')) '
                    f'FROM "{schema}"."{table}" t')
        return cur.fetchone()
