"""Maintenance of an Iceberg table the stream commits to all day: every commit adds a data file,
a delete file and a snapshot, so without it a reader opens ever more files.

Three of Iceberg's own Spark actions, in order:
- compaction (rewrite_data_files, bin-packing, applying the position deletes: a file with any
  delete is rewritten; then rewrite_position_delete_files drops the deletes left pointing at
  rewritten files), run while the caller's fence holds off the stream's commits, which would
  otherwise conflict with it;
- snapshot expiry: snapshots older than `snapshot_retention_hours` go, but never the newest one
  whose summary holds the offsets the stream resumes from (compaction's own commit carries none),
  nor anything newer;
- orphan files older than `orphan_age_hours` (written by a job that died before its commit).
"""
from __future__ import annotations

import logging
import time

from tideline.core.errors import TargetError
from tideline.targets.iceberg.snapshots import SUMMARY_OFFSETS, newest_stamped_snapshot, summary_of

log = logging.getLogger("tideline.maintenance")


def maintain_table(store, spark, schema: str, table: str, settings, fence) -> dict:
    jvm, jspark = spark.sparkContext._jvm, spark._jsparkSession
    name = f"{store.catalog}.{schema}.{table}"
    before = store.table_facts(schema, table)
    actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(jspark)
    started = time.monotonic()
    with fence():
        ice = store.java_table(spark, schema, table)
        (actions.rewriteDataFiles(ice)
         .option("delete-file-threshold", "1")        # a file with any deleted row is rewritten without it
         .option("remove-dangling-deletes", "true")
         .option("min-input-files", "2")
         .option("target-file-size-bytes", str(settings.target_file_mb * 1024 * 1024))
         .execute())
        # the delete files the rewrite left pointing at rewritten files (measured: Iceberg 1.10's
        # remove-dangling-deletes left them) go, and the rest are packed per data file
        ice = store.java_table(spark, schema, table)
        actions.rewritePositionDeletes(ice).option("rewrite-all", "true").execute()
    compact_s = time.monotonic() - started
    now_ms = int(time.time() * 1000)
    stamped = newest_stamped_snapshot(store.iceberg_table(schema, table))
    cutoff = now_ms - int(settings.snapshot_retention_hours * 3600 * 1000)
    if stamped is not None:   # keep the snapshot the stream resumes from, and everything after it
        cutoff = min(cutoff, stamped.timestamp_ms)
    ice = store.java_table(spark, schema, table)
    actions.expireSnapshots(ice).expireOlderThan(cutoff).retainLast(1).execute()
    orphan_files = actions.deleteOrphanFiles(ice).olderThan(now_ms - int(settings.orphan_age_hours * 3600 * 1000))
    if store.settings.store is not None:   # object storage: listed by the table's FileIO (S3FileIO), not Hadoop's
        orphan_files = orphan_files.usePrefixListing(True)
    orphans = orphan_files.execute()
    removed = sum(1 for _ in orphans.orphanFileLocations())
    after = store.table_facts(schema, table)
    kept = newest_stamped_snapshot(store.iceberg_table(schema, table))
    if stamped is not None and (kept is None or SUMMARY_OFFSETS not in summary_of(kept)):
        raise TargetError(f"{name}: after snapshot expiry no snapshot holds the stream's offsets any more; the "
                          f"stream resumes from the state's copy. Report this: expiry must keep snapshot "
                          f"{stamped.snapshot_id}")
    figures = {"data_files": [before["data_files"], after["data_files"]],
               "delete_files": [before["delete_files"], after["delete_files"]],
               "snapshots": [before["snapshots"], after["snapshots"]], "orphan_files_removed": removed,
               "compact_s": round(compact_s, 2), "seconds": round(time.monotonic() - started, 2)}
    log.info("%s: data files %d -> %d, delete files %d -> %d, snapshots %d -> %d, %d orphan files removed; "
             "%.1fs (compaction %.1fs, the stream's commits waited)", name, *figures["data_files"],
             *figures["delete_files"], *figures["snapshots"], removed, figures["seconds"], compact_s)
    return figures
