"""The PostgreSQL sessions a process's load pipes hand on from one chunk to the next
(pipes.copy_pipe.Sessions): only a session whose work ended is kept, one that no longer answers is
replaced, and a process keeps a few per DSN and opening statement."""
import psycopg2

from tideline.pipes import copy_pipe


class FakeSession:
    def __init__(self, n: int):
        self.n, self.closed, self.status, self.answers = n, 0, 0, True

    def cursor(self):
        session = self

        class Cursor:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def execute(self, sql):
                if not session.answers:
                    raise psycopg2.OperationalError("server closed the connection unexpectedly")
        return Cursor()

    def rollback(self):
        pass

    def get_transaction_status(self):
        return self.status

    def close(self):
        self.closed = 1


def sessions(monkeypatch):
    made = []
    monkeypatch.setattr(psycopg2, "connect", lambda dsn, **kw: made.append(FakeSession(len(made))) or made[-1])
    return copy_pipe.Sessions(), made


def test_a_session_whose_work_ended_serves_the_next_chunk(monkeypatch):
    pool, made = sessions(monkeypatch)
    first = pool.take("dsn")
    pool.give_back(first, "dsn")
    assert pool.take("dsn") is first and len(made) == 1
    assert pool.take("dsn") is not first     # taken: the next one is new


def test_a_session_in_a_transaction_or_for_another_read_is_not_handed_on(monkeypatch):
    pool, made = sessions(monkeypatch)
    busy = pool.take("dsn")
    busy.status = 2                          # in a transaction: closed, not kept
    pool.give_back(busy, "dsn")
    assert busy.closed
    other = pool.take("dsn", "SET TRANSACTION SNAPSHOT 'a'")
    pool.give_back(other, "dsn", "SET TRANSACTION SNAPSHOT 'a'")
    assert pool.take("dsn") is not other     # opened by other statements: kept apart
    assert pool.take("dsn", "SET TRANSACTION SNAPSHOT 'a'") is other


def test_a_kept_session_that_no_longer_answers_is_replaced(monkeypatch):
    pool, made = sessions(monkeypatch)
    gone = pool.take("dsn")
    pool.give_back(gone, "dsn")
    gone.answers = False                     # the server restarted since
    fresh = pool.take("dsn")
    assert fresh is not gone and gone.closed and not fresh.closed


def test_a_process_keeps_a_few_sessions_per_key(monkeypatch):
    pool, made = sessions(monkeypatch)
    taken = [pool.take("dsn") for _ in range(copy_pipe.Sessions.KEEP + 2)]
    for s in taken:
        pool.give_back(s, "dsn")
    assert sum(s.closed for s in taken) == 2


def test_a_copier_shipped_to_sparks_workers_takes_the_pool_of_the_process_it_runs_in():
    from pyspark import cloudpickle
    copier = copy_pipe.make_pipe_copier(copy_pipe.PostgresPipeSource("dsn", None), "target dsn", "COPY", "t", "binary")
    shipped = cloudpickle.loads(cloudpickle.dumps(copier))
    assert shipped.__globals__["SESSIONS"] is copy_pipe.SESSIONS
