"""A driver knows when the process that started it is gone (tideline.launcher), with real processes."""
import subprocess
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
