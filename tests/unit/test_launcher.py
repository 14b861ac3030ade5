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

    stopped, abandoned = [], []

    def stop_that_hangs(failure):
        stopped.append(failure)
        threading.Event().wait()   # as a stop whose JVM is frozen
    cfg = type("Cfg", (), {"name": "shop"})()
    w = stream_watch.StreamWatch(cfg, None, None, {}, {}, None, stop_that_hangs, launcher=Gone())
    w.run_launcher_check(threading.Event(), abandoned.append)
    assert len(stopped) == 1 and abandoned == stopped
    assert "pid 4242" in str(stopped[0]) and "stops itself" in str(stopped[0])
