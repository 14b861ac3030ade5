"""Errors a person can act on. Each names what is wrong (file, field, table, offset) and what to do.

Split as in dlt: `TransientError` may succeed on retry (a service is restarting); `TerminalError`
will fail the same way until a person changes something (config, schema, retention).
"""
from __future__ import annotations


class TidelineError(Exception):
    """Base of every error Tideline raises on purpose. `table`: the synced table it concerns, if one,
    so the caller can record it in that table's state."""

    def __init__(self, *args, table: str | None = None):
        super().__init__(*args)
        self.table = table


class TransientError(TidelineError):
    """Retrying later may succeed (service unavailable, lock timeout)."""


class TerminalError(TidelineError):
    """Retrying will not help until a person acts; the message says how."""


class ConfigError(TerminalError):
    """A pipeline config file is invalid. `problems` lists (field path, message)."""

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        lines = [f"{source}: invalid pipeline config ({len(problems)} problem{'s' if len(problems) != 1 else ''})"]
        lines += [f"  - {field}: {msg}" for field, msg in problems]
        super().__init__("\n".join(lines))


class SourceError(TerminalError):
    """The source database cannot serve the pipeline as configured (privileges, wal_level, missing table)."""


class RefusedValue(SourceError):
    """A value of the source's table that its target cannot hold (named with its column and key):
    that table halts, alone, until the value is fixed; its pipeline's other tables go on."""


class TargetError(TerminalError):
    """The target database cannot take the load (privileges, incompatible existing table)."""


class FencedError(TerminalError):
    """This run's fencing epoch is stale: a newer run owns the table; this one must stop. `owner`:
    the run that owns it now, in its own words (load.full_load.run_owner)."""

    def __init__(self, *args, table: str | None = None, owner: str | None = None):
        super().__init__(*args, table=table)
        self.owner = owner


class OrphanedError(TerminalError):
    """The Airflow task that started this job is gone and nobody stops the job: it stops itself
    (tideline.launcher). What it committed stays; the next run resumes from there."""


class PipelineRemovedError(TerminalError):
    """The pipeline's YAML was deleted while its stream ran: the stream stops (what it committed
    stays); decommission what the pipeline left (ops.lifecycle), or put the YAML back."""


class ResnapshotRequired(TerminalError):
    """The target can only be brought in line by a new full load of the table (the DAG does it)."""


class DataLossError(ResnapshotRequired):
    """Kafka no longer holds an offset the stream must resume from."""


class BadMessageError(TerminalError):
    """A change event cannot be parsed or applied; the message names topic, partition and offset."""


class HaltedError(TerminalError):
    """Tables of a stream halted on changes the target refuses (or a schema change, or a bad
    message); each one's state says which event and what to do. Exit status 6."""


class LoadVerificationError(TerminalError):
    """Rows read inside the snapshot differ from rows landed; nothing was swapped in."""


class SchemaChangeError(TerminalError):
    """A source schema change Tideline cannot apply safely; the table halts at its last commit
    (core.schema_drift decides which changes those are)."""


# Exit statuses of the Spark entrypoints (documented in README.md; the DAG reacts to them).
EXIT_OK = 0
EXIT_FAILED = 1          # unexpected failure; retrying may help
EXIT_CONFIG = 2          # bad config, params, source or target setup: a person must fix it
EXIT_FENCED = 3          # a newer run owns the table; this run committed nothing
EXIT_RESNAPSHOT = 4      # Kafka lost offsets the stream needs, or the source changed in a way only a
                         # reload can follow: the table is 'needs_resnapshot' (the DAG reloads it by itself)
EXIT_VERIFICATION = 5    # loaded rows did not match the snapshot; nothing was swapped in
EXIT_HALTED = 6          # a schema change or bad message stopped the pipeline: a person must act


def exit_code(exc: BaseException) -> int:
    for cls, code in ((FencedError, EXIT_FENCED), (ResnapshotRequired, EXIT_RESNAPSHOT),
                      (LoadVerificationError, EXIT_VERIFICATION), (SchemaChangeError, EXIT_HALTED),
                      (BadMessageError, EXIT_HALTED), (HaltedError, EXIT_HALTED), (OrphanedError, EXIT_FAILED),
                      (TerminalError, EXIT_CONFIG)):
        if isinstance(exc, cls):
            return code
    return EXIT_FAILED
