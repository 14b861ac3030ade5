"""The overview in Prometheus text format (served at /tideline/metrics). Every metric carries the
pipeline and table labels; README lists them with example alert rules."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from tideline.view.overview import PipelineOverview

PHASES = ("new", "loading", "streaming", "needs_resnapshot", "halted", "batch", "refused", "paused", "removed")
VERIFY_KINDS = ("missing", "extra", "different")

# name -> help: the documented set (a test checks the endpoint carries every one)
METRICS = {
    "tideline_pipeline_up": "1 when the pipeline's target, source and Kafka answered, else 0 (see the view for why)",
    "tideline_stream_waiting_seconds": "seconds the pipeline's stream has been waiting for a part that does not "
                                       "answer (or to start again after its job failed); 0 when it is not waiting",
    "tideline_stream_tries": "failed stream submissions in the current wait, 0 when it is not waiting",
    "tideline_source_log_retained_bytes": "bytes of the source's log the pipeline's capture holds (a replication "
                                          "slot's retained WAL; the binlogs from a MariaDB connector's position)",
    "tideline_source_log_unread_seconds": "seconds nobody has read the pipeline's replication slot, 0 while read",
    "tideline_source_log_expires_seconds": "MariaDB: seconds at most until binlog expiry purges the capture's "
                                           "position (its binlog headroom)",
    "tideline_source_oldest_transaction_seconds": "while a full load runs: the age of the oldest transaction the "
                                                  "pipeline's source role holds open (the source's vacuum cannot "
                                                  "pass it)",
    "tideline_table_phase": "1 for the table's current phase (label phase), 0 for the others",
    "tideline_table_epoch": "the table's fencing epoch (rises with every run that takes the table over)",
    "tideline_table_target_rows": "rows in the target table (PostgreSQL's live-row statistic: no count(*) per scrape)",
    "tideline_lag_events": "change events on Kafka not yet applied, per partition",
    "tideline_lag_seconds": "0 when nothing waits, else seconds since the newest source change the target applied",
    "tideline_retention_headroom_seconds": "seconds until Kafka retention deletes an event the stream still needs "
                                           "(absent when nothing is pending)",
    "tideline_retention_covered": "0 when Kafka already deleted an event the stream needs (a reload follows)",
    "tideline_events_applied": "change events applied to the table since it was first loaded",
    "tideline_auto_reloads": "times the table was found needing a reload, which the DAG did by itself (0 where "
                             "nothing diverged is the goal; its last cause is in the view and make status)",
    "tideline_last_batch_duration_seconds": "duration of the last stream batch that changed the table",
    "tideline_last_batch_age_seconds": "seconds since that batch committed",
    "tideline_load_rows": "rows the table's running full load (or batch run) has stored so far, 0 when none runs",
    "tideline_load_rows_expected": "rows the table's running full load expects to store (its snapshot's count or, "
                                   "chunked, the source's estimate); absent when unknown",
    "tideline_load_eta_seconds": "seconds until the table's running full load ends at its pace; absent when unknown",
    "tideline_verify_differences": "rows the last verify found missing / extra / different (label kind)",
    "tideline_verify_equal": "1 when the last verify found source and target equal, 0 when not",
}


PIPELINE_METRICS = ("tideline_pipeline_up", "tideline_stream_waiting_seconds", "tideline_stream_tries",
                    "tideline_source_log_retained_bytes", "tideline_source_log_unread_seconds",
                    "tideline_source_log_expires_seconds",
                    "tideline_source_oldest_transaction_seconds")


COUNTERS = ("tideline_events_applied", "tideline_auto_reloads")


class _Collector:
    def __init__(self, pipelines: list[PipelineOverview]):
        self.pipelines = pipelines

    def collect(self):
        fam = {name: GaugeMetricFamily(name, text, labels=_labels(name)) for name, text in METRICS.items()
               if name not in COUNTERS}
        applied = CounterMetricFamily("tideline_events_applied", METRICS["tideline_events_applied"],
                                      labels=["pipeline", "table"])
        reloads = CounterMetricFamily("tideline_auto_reloads", METRICS["tideline_auto_reloads"],
                                      labels=["pipeline", "table"])
        for p in self.pipelines:
            fam["tideline_pipeline_up"].add_metric([p.name], 1.0 if p.state == "ok" else 0.0)
            if p.state in ("ok", "capture failed"):   # read: a wait (or none) is known
                fam["tideline_stream_waiting_seconds"].add_metric([p.name], float(p.waiting_s or 0))
                tries = next((t.stream_tries for t in p.tables if t.stream_tries is not None), 0)
                fam["tideline_stream_tries"].add_metric([p.name], float(tries if p.waiting else 0))
            held = next((t for t in p.tables if t.source_hold), None)
            if held is not None:
                _maybe(fam["tideline_source_log_retained_bytes"], [p.name], held.source_retained_bytes)
                fam["tideline_source_log_unread_seconds"].add_metric([p.name], float(held.source_unread_s or 0))
                _maybe(fam["tideline_source_log_expires_seconds"], [p.name], held.source_expires_in_s)
            loading = next((t for t in p.tables if t.source_oldest_xact_s is not None), None)
            if loading is not None:
                fam["tideline_source_oldest_transaction_seconds"].add_metric([p.name], loading.source_oldest_xact_s)
            for t in p.tables:
                key = [p.name, t.table]
                for phase in PHASES:
                    fam["tideline_table_phase"].add_metric(key + [phase], 1.0 if t.phase == phase else 0.0)
                _maybe(fam["tideline_table_epoch"], key, t.epoch)
                _maybe(fam["tideline_table_target_rows"], key, t.target_rows)
                for part, n in sorted(t.lag.items()):
                    fam["tideline_lag_events"].add_metric(key + [str(part)], float(n))
                _maybe(fam["tideline_lag_seconds"], key, t.lag_s)
                _maybe(fam["tideline_retention_headroom_seconds"], key, t.headroom_s)
                if t.lag or not t.covered:
                    fam["tideline_retention_covered"].add_metric(key, 1.0 if t.covered else 0.0)
                applied.add_metric(key, float(t.events_applied))
                reloads.add_metric(key, float(t.auto_reloads))
                _maybe(fam["tideline_last_batch_duration_seconds"], key, t.last_batch_s)
                _maybe(fam["tideline_last_batch_age_seconds"], key, t.last_batch_age_s)
                fam["tideline_load_rows"].add_metric(key, float(t.load_rows or 0))
                load = t.load_progress
                if load is not None:
                    _maybe(fam["tideline_load_rows_expected"], key, load.rows_total)
                    _maybe(fam["tideline_load_eta_seconds"], key, load.eta_s)
                if t.verify_outcome is not None:
                    counts = t.verify_counts or {}
                    for kind in VERIFY_KINDS:
                        fam["tideline_verify_differences"].add_metric(key + [kind], float(counts.get(kind, 0)))
                    fam["tideline_verify_equal"].add_metric(key, 1.0 if t.verify_outcome == "succeeded" else 0.0)
        yield from fam.values()
        yield applied
        yield reloads


def _labels(name: str) -> list[str]:
    if name in PIPELINE_METRICS:
        return ["pipeline"]
    extra = {"tideline_table_phase": ["phase"], "tideline_lag_events": ["partition"],
             "tideline_verify_differences": ["kind"]}.get(name, [])
    return ["pipeline", "table"] + extra


def _maybe(family, labels: list[str], value) -> None:
    if value is not None:
        family.add_metric(labels, float(value))


def render(pipelines: list[PipelineOverview]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(pipelines))
    return generate_latest(registry)
