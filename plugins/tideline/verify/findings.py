"""What a verify found, where it is more than fingerprints: a table the target lacks. The findings
themselves are recorded in the run history by tideline.state.ledger (record_verify), and read
back by repair (last_differences), which re-reads exactly the ranges found different."""
from __future__ import annotations

from tideline.core.config import PipelineConfig
from tideline.core.verify_plan import VerifyReport


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
