"""A driver knows when the process that started it is gone (tideline.launcher), with real processes."""
import os
import signal
import subprocess
import sys
import threading
import time

from tideline import launcher
from tideline.launcher import Launcher


def test_a_child_whose_starter_died_sees_it_gone_and_one_whose_starter_lives_does_not():
    # sh starts a sleep (our stand-in for spark-submit's JVM), prints its pid, then waits or exits
    starter = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; read _"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    child = int(starter.stdout.readline())
    try:
        watched = Launcher(jvm=child, pid=starter.pid)
        assert not watched.gone()
        starter.stdin.close()   # the starter exits; its child is re-parented
        starter.wait(10)
        deadline = time.time() + 10
        while not watched.gone() and time.time() < deadline:
            time.sleep(0.05)
        assert watched.gone()
    finally:
        subprocess.run(["kill", str(child)])


def test_the_jvm_itself_gone_is_not_the_launcher_gone_and_tests_have_no_launcher():
    done = subprocess.Popen(["true"])
    done.wait()
    assert not Launcher(jvm=done.pid, pid=1).gone()   # the stream reports its JVM's death itself
    assert launcher.current() is None                  # pytest is not a spark-submit driver


def test_end_hard_kills_the_jvm_and_exits_with_the_code_whatever_hangs():
    jvm = subprocess.Popen(["sleep", "30"])   # stands in for the JVM
    # a process whose main thread hangs (a stop that never returns) ends itself from another thread
    job = subprocess.Popen([sys.executable, "-c", f"""
import threading, time
from tideline.launcher import Launcher
threading.Thread(target=lambda: (time.sleep(0.2), Launcher(jvm={jvm.pid}, pid=1).end_hard(7))).start()
threading.Event().wait()
"""], env={**os.environ, "PYTHONPATH": "plugins"})
    try:
        assert job.wait(20) == 7
        assert jvm.wait(5) == -signal.SIGKILL
    finally:
        jvm.kill()
        job.kill()


def test_an_orphaned_stream_is_stopped_then_ended_hard_if_the_stop_hangs(monkeypatch):
    from tideline.stream import watch as stream_watch
    monkeypatch.setattr(stream_watch, "LAUNCHER_CHECK_S", 0.01)
    monkeypatch.setattr(stream_watch, "ORPHAN_EXIT_S", 0.05)

    class Gone:
        pid = 4242

        def gone(self):
            return True

        def keep_output(self, name):   # the real one points pytest's own output at a file
            return f"/logs/{name}.log"

    stopped, abandoned = [], []

    def stop_that_hangs(failure):
        stopped.append(failure)
        threading.Event().wait()   # as a stop whose JVM is frozen
    cfg = type("Cfg", (), {"name": "shop"})()
    w = stream_watch.StreamWatch(cfg, None, None, {}, {}, None, stop_that_hangs, launcher=Gone())
    w.run_launcher_check(threading.Event(), abandoned.append)
    deadline = time.time() + 10
    while not abandoned and time.time() < deadline:
        time.sleep(0.01)
    assert len(stopped) == 1 and abandoned == stopped
    assert "pid 4242" in str(stopped[0]) and "stops itself" in str(stopped[0])
    assert "Its log from then on: /logs/shop.log" in str(stopped[0])

    class GoneWithNowhereToLog(Gone):
        def keep_output(self, name):
            raise PermissionError(13, "Permission denied", f"/logs/{name}.log")
    stopped.clear()
    abandoned.clear()
    w = stream_watch.StreamWatch(cfg, None, None, {}, {}, None, stop_that_hangs, launcher=GoneWithNowhereToLog())
    w.run_launcher_check(threading.Event(), abandoned.append)
    deadline = time.time() + 10
    while not abandoned and time.time() < deadline:
        time.sleep(0.01)
    assert len(stopped) == 1 and abandoned == stopped   # it still stops, and ends hard
    assert "Its log from then on: nowhere (its log file could not be opened: [Errno 13]" in str(stopped[0])


def test_an_orphan_logs_to_a_file_once_nobody_reads_its_pipe(tmp_path):
    # the job writes to a pipe nobody reads (as a frozen JVM's), fills it, and keeps logging
    job = subprocess.Popen([sys.executable, "-c", """
import fcntl, logging, os, sys
from tideline.launcher import Launcher
fcntl.fcntl(1, fcntl.F_SETFL, fcntl.fcntl(1, fcntl.F_GETFL) | os.O_NONBLOCK)
try:
    while True:
        os.write(1, b"x" * 4096)   # until the pipe is full
except BlockingIOError:
    pass
path = Launcher(jvm=1, pid=1).keep_output("shop")
logging.basicConfig(level=logging.INFO)   # stderr, as the job's log
logging.getLogger("tideline").error("the orphan's own words")
print("and its prints", flush=True)
sys.stderr.write(path + chr(10))
"""], env={**os.environ, "PYTHONPATH": "plugins", "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(tmp_path)},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert job.wait(20) == 0   # nothing blocked on the full pipe
    finally:
        job.kill()
    [kept] = (tmp_path / launcher.ORPHANS_DIR).iterdir()
    assert kept.name == f"shop-{job.pid}.log"
    text = kept.read_text()
    assert "the orphan's own words" in text and "and its prints" in text and str(kept) in text
