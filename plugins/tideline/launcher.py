"""The process that started this Spark job — the Airflow task, through spark-submit — and whether
it is still there.

A driver outlives its task when the task dies without stopping it (kill -9, its scheduler
killed): spark-submit is re-parented and the job runs on. A full load ends by itself; a stream
would go on for ever, with no task in Airflow to show or stop it, until a newer run fenced it
(found on a test stack: a run marked failed, its stream still applying an hour later). The
stream's watch asks `gone()` and stops the run; if that stop hangs, `end_hard()` ends it as a kill -9
would (a CI run saw an orphan that never stopped: nobody is left to end it otherwise). From then
on its log goes to a file (`keep_output`): the pipe it went to has no reader left."""
from __future__ import annotations

import os
import signal
import tempfile
from dataclasses import dataclass

ORPHANS_DIR = "tideline-orphans"   # under Airflow's task log folder (or the temp folder)


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@dataclass(frozen=True)
class Launcher:
    jvm: int      # spark-submit's JVM, this Python driver's parent
    pid: int      # the process that ran spark-submit: the Airflow task

    def gone(self) -> bool:
        """The JVM lives but its parent is no longer the task (re-parented: the task died). The
        JVM's own death is not this: the stream sees its gateway fail and says so itself."""
        try:
            return _parent(self.jvm) != self.pid
        except (OSError, ValueError, IndexError):
            return False

    def keep_output(self, name: str) -> str:
        """Points this process's stdout and stderr — its log — at a file, and returns the file's
        path. They went through the JVM to the task that is gone: nobody reads them any more, and
        a write blocks for good once that pipe is full (a frozen JVM, say), so a log line could
        hang the very thread that ends the orphan."""
        base = os.environ.get("AIRFLOW__LOGGING__BASE_LOG_FOLDER") or tempfile.gettempdir()
        path = os.path.join(base, ORPHANS_DIR, f"{name}-{os.getpid()}.log")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        return path

    def end_hard(self, code: int) -> None:
        """Kills the JVM and exits this process with `code`, skipping every clean-up that could
        hang. Safe where a kill -9 is: what was committed is in the target's transactions, what was
        not is rolled back, and the next run resumes from the committed offsets."""
        try:
            os.kill(self.jvm, signal.SIGKILL)
        except OSError:
            pass
        os._exit(code)


def current() -> Launcher | None:
    """This driver's launcher, or None when it is not a spark-submit driver on this host (an
    in-process session in tests or a notebook, a system without /proc)."""
    jvm = os.getppid()
    try:
        with open(f"/proc/{jvm}/cmdline", "rb") as f:
            if b"java" not in f.read().split(b"\0")[0]:
                return None
        return Launcher(jvm, _parent(jvm))
    except (OSError, ValueError, IndexError):
        return None
