"""What a verify found, in the run history (tideline.runs, verify_findings, verify_ranges): written
by verify, read back by repair, which re-reads exactly the ranges found different."""
from __future__ import annotations

from tideline import state
from tideline.core.config import PipelineConfig
from tideline.core.verify_plan import KeyRange, VerifyReport


def record(conn, pipeline: str, report: VerifyReport) -> int:
    """The verify's run row, its sample of differing keys and every differing range."""
    conn.autocommit = False
    try:
        with conn, conn.cursor() as cur:
            run_id = state.run_start_in(cur, pipeline, report.table, "verify", None)
            state.run_end(cur, run_id, "succeeded" if report.equal else "failed", report.source_rows, report.summary(),
                          counts=dict(report.counts))
            for f in report.samples:
                cur.execute("INSERT INTO tideline.verify_findings (run_id, kind, key) VALUES (%s, %s, %s)",
                            (run_id, f.kind, list(f.key)))
            for r in report.ranges:
                cur.execute("INSERT INTO tideline.verify_ranges (run_id, lo, hi) VALUES (%s, %s, %s)",
                            (run_id, list(r.lo) if r.lo is not None else None,
                             list(r.hi) if r.hi is not None else None))
    finally:
        conn.autocommit = True
    return run_id


def last_differences(conn, pipeline: str, table: str) -> tuple[int | None, list[KeyRange]]:
    """The newest verify of a table and the key ranges it found different (empty when it was clean)."""
    with conn.cursor() as cur:
        cur.execute("SELECT run_id FROM tideline.runs WHERE pipeline = %s AND table_name = %s AND kind = 'verify' "
                    "AND outcome <> 'running' ORDER BY run_id DESC LIMIT 1", (pipeline, table))
        row = cur.fetchone()
        if row is None:
            return None, []
        cur.execute("SELECT lo, hi FROM tideline.verify_ranges WHERE run_id = %s ORDER BY id", (row[0],))
        ranges = [KeyRange(tuple(lo) if lo is not None else None, tuple(hi) if hi is not None else None)
                  for lo, hi in cur.fetchall()]
    return row[0], ranges


def missing_report(cfg: PipelineConfig, engine, source_conn, table: str, st) -> VerifyReport:
    """A table the target lacks, whatever its phase says: every source row is missing (a difference,
    never a crash nor a skip). Its key ranges are not listed: a repair re-reads ranges of a table
    that exists; the fix is a full reload, which the note says."""
    rows = engine.row_count(source_conn, cfg.source_schema(table), table)
    report = VerifyReport(table, source_rows=rows or 0, target_rows=0)
    report.counts["missing"] = rows or 0
    report.no_table = True   # not equal, even for an empty source table: no load of it committed
    phase = st.phase if st is not None else "new"
    report.note = (f"the target table {cfg.target_schema(table)}.{cfg.target_table(table)} does not exist (the state "
                   f"says {phase}): none of its rows is in the target; run action=full_reload for it")
    return report
