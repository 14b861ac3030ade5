"""The training run behind the Spark driver's class archive (stackctl.build_class_archive).

A Spark job's driver JVM loads and verifies ~15,000 classes before its first batch: ~2.5 s of a
job's start-up on these machines, paid again by every stream, load and batch task. Java's
class-data sharing stores them once, parsed and verified, in an archive that every later driver
maps (read-only, shared between the drivers of one host). This script is the workload the archive
is recorded from: it does what a Tideline job's driver does before and around its batches (a
session, Arrow transfers to Python, a micro-batch stream with foreachBatch and a checkpoint), so
those classes are in it. Run by spark-submit with -XX:ArchiveClassesAtExit.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from tideline.spark_session import get_session  # noqa: E402


def main() -> None:
    spark = get_session("tideline-class-archive")
    with tempfile.TemporaryDirectory(prefix="tideline-class-archive-") as tmp:
        src = Path(tmp) / "in"
        src.mkdir()
        (src / "1.json").write_text("\n".join(json.dumps({"k": i, "v": f"row {i}"}) for i in range(1000)))
        spark.read.json(str(src)).selectExpr("k", "cast(v as binary) as v").toArrow()
        seen = []
        query = (spark.readStream.schema("k long, v string").json(str(src)).writeStream
                 .foreachBatch(lambda df, _id: seen.append(df.toArrow().num_rows))
                 .option("checkpointLocation", str(Path(tmp) / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        if sum(seen) != 1000:
            raise SystemExit(f"class archive training: the stream saw {sum(seen)} of 1000 rows")
    spark.stop()


if __name__ == "__main__":
    main()
