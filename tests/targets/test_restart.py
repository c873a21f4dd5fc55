"""Target.restart_instances with real processes (a plain HTTP server per instance): a teardown that begins while
the victims are being stopped gets no fresh process, and the health wait is startup_timeout for all of them
together, not one startup_timeout each."""

import sys
import time

import pytest

from chaos.common import same_process
from chaos.experiment.model import TargetSpec
from chaos.targets.base import TargetError
from chaos.targets.process import ProcessTarget

SERVE = [sys.executable, "-m", "http.server", "{port}", "--bind", "127.0.0.1"]
NEVER_HEALTHY = [sys.executable, "-c", "import time, sys; time.sleep(60)", "{port}"]


def target(tmp_path, command, replicas=1, startup_timeout=30.0) -> ProcessTarget:
    spec = TargetSpec(kind="process", name="t", settings={"command": command, "health_path": "/"},
                      source="t.yaml", replicas=replicas, startup_timeout=startup_timeout)
    t = ProcessTarget(spec, str(tmp_path))
    t.spawned = []
    t.on_spawn = lambda inst: t.spawned.append(inst.pid)
    return t


def test_a_teardown_during_the_stop_starts_nothing(tmp_path):
    t = target(tmp_path, SERVE)
    t.up()
    try:
        inst = t.instances[0]
        first = (inst.pid, inst.create_time)
        tearing_down = []
        stop = t.stop_instance

        def stop_then_teardown(i, grace=10.0):
            stop(i, grace)
            tearing_down.append(True)  # the run's teardown began while this restart was stopping its victims

        t.stop_instance = stop_then_teardown
        with pytest.raises(TargetError, match="interrupted before p0 was restarted"):
            t.restart_instances([inst], should_stop=lambda: bool(tearing_down))
        assert t.spawned == [first[0]], "no process may be started once the run is tearing down"
        assert not same_process(*first)
    finally:
        t.down(grace=1.0)


@pytest.mark.slow
def test_the_health_wait_is_one_deadline_for_all(tmp_path):
    timeout = 4.0
    t = target(tmp_path, NEVER_HEALTHY, replicas=2, startup_timeout=timeout)
    try:
        for inst in t.instances:
            t.start_instance(inst)
        began = time.monotonic()
        with pytest.raises(TargetError) as e:
            t.wait_all_healthy(t.instances)
        took = time.monotonic() - began
        assert "p0 did not become healthy" in str(e.value) and "p1 did not become healthy" in str(e.value)
        # One deadline: about timeout, not 2 x timeout (the second wait used to start its own full timeout).
        assert took < 1.75 * timeout, took
    finally:
        t.down(grace=1.0)
