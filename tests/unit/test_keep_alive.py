"""core.keep_alive: a stream waits out any outage, retries a crash with a capped backoff, and gives
up only on a failure that repeats with every part answering."""
from datetime import datetime, timedelta, timezone

from tideline.core import keep_alive as ka

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)


def test_an_outage_is_waited_for_however_long_it_lasts():
    episode, now = None, T0
    for n in range(1, 500):   # ~2 days of failed submissions while Kafka is away
        v = ka.after_failure(episode, ran_s=20, now=now, unreachable=["kafka (tideline_kafka): timed out"],
                             error="StreamingQueryException: Timeout expired while fetching topic metadata")
        assert v.action == "wait" and v.delay_s == ka.LOOK_EVERY_S
        episode, now = v.episode, now + timedelta(minutes=6)
        assert episode.tries == n and episode.since == T0
    assert episode.describe() == ("waiting for kafka (tideline_kafka): timed out since 2026-11-28 12:00:00 UTC "
                                  "(try 500)")


def test_a_crash_with_every_part_up_is_submitted_again_soon_then_backs_off_and_is_capped():
    episode, delays = None, []
    for n in range(8):   # a different error each time: never "the same failure"
        v = ka.after_failure(episode, ran_s=30, now=T0, unreachable=[], error=f"driver died ({n})")
        assert v.action == "retry"
        episode = v.episode
        delays.append(v.delay_s)
    assert delays == [5, 15, 45, 120, 120, 120, 120, 120]
    assert max(delays) <= 300   # the bound: at most ~5 minutes between tries
    assert episode.describe().startswith("waiting for the stream to start again since")


def test_the_same_quick_failure_with_every_part_up_gives_up_and_says_why():
    episode = None
    for n in range(ka.REPEATS - 1):
        v = ka.after_failure(episode, ran_s=12, now=T0, unreachable=[], error="TypeError: bad\n  traceback")
        assert v.action == "retry", n
        episode = v.episode
    v = ka.after_failure(episode, ran_s=12, now=T0, unreachable=[], error="TypeError: bad\n  traceback")
    assert v.action == "give_up"
    assert f"failed {ka.REPEATS} times in a row the same way" in v.reason and "TypeError: bad" in v.reason


def test_an_outage_between_the_same_failures_counts_them_again_from_zero():
    episode = None
    for _ in range(ka.REPEATS - 1):
        episode = ka.after_failure(episode, 12, T0, [], "TypeError: bad").episode
    episode = ka.after_failure(episode, 12, T0, ["target (t): refused"], "TypeError: bad").episode
    assert ka.after_failure(episode, 12, T0, [], "TypeError: bad").action == "retry"


def test_a_stream_that_ran_well_before_failing_starts_a_new_episode():
    episode = None
    for _ in range(4):
        episode = ka.after_failure(episode, 12, T0, [], "killed").episode
    later = T0 + timedelta(hours=3)
    v = ka.after_failure(episode, ka.RAN_WELL_S + 1, later, [], "killed")
    assert v.episode.since == later and v.episode.tries == 1 and v.delay_s == ka.FIRST_DELAY_S
