"""A timeline row says what happened in words: no field only `chaos recover` reads (start times, the run's own
folder as its id), no None, every instance named."""

from chaos.report.timeline import event_detail


def test_each_event_reads_as_words():
    inst = {"index": 1, "id": "r1", "url": "http://127.0.0.1:1", "port": 1, "pid": 42, "create_time": 1.5}
    rows = {
        "run_started": {"experiment": "kill-instance", "pid": 7, "create_time": 1.2, "run_dir": "/tmp/x/run",
                        "run_id": "/tmp/x/run"},
        "process_started": {"instance": {**inst, "pgid": 42}, "restart": True},
        "target_started": {"instances": [{"id": "r0"}, inst]},
        "fault_applied": {"fault": "kill-r1", "description": "kill_instance r1", "error": None},
        "fault_reverted": {"fault": "kill-r1", "teardown": True, "error": "r1 did not come back",
                           "instances": [inst]},
        "final_health": {"health": {"r0": True, "r1": False}},
        "run_finished": {"verdict": "failed", "exit_code": 1},
    }
    got = {k: event_detail({"t": 0.0, "event": k, **v}) for k, v in rows.items()}
    assert got["run_started"] == "kill-instance, pid 7"
    assert got["process_started"] == "r1 pid 42 (restart)"
    assert got["target_started"] == "up: r0, r1"
    assert got["fault_applied"] == "kill-r1: kill_instance r1"
    assert got["fault_reverted"] == "kill-r1 at the teardown; error: r1 did not come back"
    assert got["final_health"] == "r0 healthy, r1 NOT healthy"
    assert got["run_finished"] == "failed (exit 1)"
    assert not any("create_time" in v or "run_id" in v or "None" in v for v in got.values()), got


def test_an_event_it_does_not_know_keeps_its_plain_fields():
    e = {"t": 0.0, "event": "something_new", "count": 3, "nothing": None, "nested": {"a": 1}, "run_id": "/x"}
    assert event_detail(e) == "count=3"
    # a known event written by another version, its fields missing or of another shape: the plain form
    assert event_detail({"t": 0.0, "event": "final_health", "health": "yes"}) == "health=yes"
