"""Why a stream never stays dead, pure: what the stream task — and a full load's, which the stream
waits for — does after its Spark job ended with a failure that is not a person's to fix
(core.errors: not config, not halted, not fenced).

The task keeps one Airflow try alive for as long as the pipeline should stream, and submits the
job again itself:

- a part the stream needs does not answer (the target, the source, Kafka, the Spark master): it
  **waits for that part** — it looks again every LOOK_EVERY_S and submits as soon as every part
  answers, however long the outage (a weekend, an upgrade). No give-up: the outage is not ours.
- every part answers and the job still failed (its driver was killed, its JVM died): it submits
  again after a backoff that starts at FIRST_DELAY_S and grows BACKOFF_FACTOR times up to
  MAX_DELAY_S. One death (a kill -9, an OOM) is the common case and costs only the driver's
  start; failures that repeat reach the cap by the fourth try (5, 15, 45, 120 s: ~3 minutes
  of tries before the same error a fifth time gives up; the doubling from 15 s gave ~4). A job that ran longer
  than RAN_WELL_S before it failed starts a new episode (the backoff starts low again).
- the same error, with every part answering, REPEATS times in a row, each within RAN_WELL_S of
  its start: a failure that will fail again. The task fails, with that error, and alerts — never
  a retry loop on it.

Airflow's own task retries are only for the task's process dying (a scheduler or host killed).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone

FIRST_DELAY_S = 5.0
BACKOFF_FACTOR = 3
MAX_DELAY_S = 120.0      # the bound is ~5 min between tries; recovery stays within 2 min of an outage
LOOK_EVERY_S = 10.0      # how often a waiting stream asks whether its parts answer again (a few connects)
RAN_WELL_S = 300.0       # a job that ran this long before failing was streaming: a new episode
REPEATS = 5              # the same failure this many times in a row, all parts up: it will fail again


@dataclass(frozen=True)
class Episode:
    """One stretch of failures of a stream, from its first to the submission that held."""
    since: datetime
    tries: int = 0                     # failed submissions in this episode
    waiting_for: tuple[str, ...] = ()  # the parts that did not answer at the last look
    last_error: str = ""
    crashes: int = 0                   # quick failures in a row with every part answering (the backoff)
    same_error: int = 0                # ... of them with the same error (the give-up)

    @property
    def what(self) -> str:
        return "; ".join(self.waiting_for) if self.waiting_for else "the stream to start again"

    def describe(self) -> str:
        return waiting_line(self.what, self.since, self.tries)


@dataclass(frozen=True)
class Verdict:
    action: str          # "wait" (for parts to answer, then submit) | "retry" (after delay_s) | "give_up"
    episode: Episode
    delay_s: float = 0.0
    reason: str = ""


def waiting_line(what: str, since: datetime, tries: int) -> str:
    """'waiting for <what> since <when> (try n)': what the log, status, the view and alerts say;
    n is the submission coming next."""
    return f"waiting for {what} since {since.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC (try {tries + 1})"


def first_line(error: str) -> str:
    text = (error or "").strip()
    return text.splitlines()[0][:500] if text else ""


def after_failure(episode: Episode | None, ran_s: float, now: datetime, unreachable: list[str],
                  error: str) -> Verdict:
    """What to do after a submission that ran `ran_s` seconds failed with `error`, while the parts
    named in `unreachable` ('kafka: ...', 'target: ...') did not answer."""
    if episode is None or ran_s >= RAN_WELL_S:
        episode = Episode(since=now)
    line = first_line(error)
    if unreachable:
        episode = replace(episode, tries=episode.tries + 1, waiting_for=tuple(unreachable), last_error=line,
                          crashes=0, same_error=0)
        return Verdict("wait", episode, LOOK_EVERY_S, f"{'; '.join(unreachable)}: did not answer")
    same = episode.same_error + 1 if episode.crashes and line == episode.last_error else 1
    episode = replace(episode, tries=episode.tries + 1, waiting_for=(), last_error=line,
                      crashes=episode.crashes + 1, same_error=same)
    if same >= REPEATS:
        return Verdict("give_up", episode, 0.0,
                       f"the stream failed {same} times in a row the same way, with every part it needs "
                       f"answering, each within {RAN_WELL_S:.0f}s of its start: it will fail again until a "
                       f"person acts. Last error: {line or 'none reported (see the task log)'}")
    delay = min(FIRST_DELAY_S * BACKOFF_FACTOR ** (episode.crashes - 1), MAX_DELAY_S)
    return Verdict("retry", episode, delay, f"the stream ended ({line or 'no error reported'}) with every part "
                                            f"answering")
