"""PostgreSQL as a target: a shadow table swapped in with the state in one transaction for a
snapshot, one transaction per stream batch that also holds Tideline's state, COPY from the
load's tasks, batch-mode merges, verify and repair (`target.PostgresTarget`)."""
from tideline.targets.base import Capabilities, TargetSpec

TARGET = TargetSpec(
    kind="postgres", conn_types=("postgres", "postgresql"),
    capabilities=Capabilities(holds_state=True, snapshot_publish="shadow_swap", copy_in=True, batch=True,
                              chunked_loads=True, table_extras=True, history=True),
    implementation="tideline.targets.postgres.target:PostgresTarget",
    description="a PostgreSQL database: tables swapped in whole, every batch one transaction with the state")
