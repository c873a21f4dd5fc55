"""A timed replay inside an experiment run: a log the load could not finish sending fails the run, naming what it
did not send; one sent whole passes that check."""

import json

import pytest

from .conftest import leftovers, report
from .test_runs import chaos_run, write

pytestmark = pytest.mark.slow  # each test makes a whole run

EXP = """\
name: replay-{name}
target: {{kind: reference, replicas: 1, preset: tiny, startup_timeout: 30s}}
load: {{workload: replay, replay: log.jsonl, replay_speed: 1, duration: {duration}, max_requests: 40,
        timeouts: {{connect: 2s, first_token: 5s, total: 10s}}}}
"""


def _log(tmp_path, n=40, span_s=8.0):
    with open(tmp_path / "log.jsonl", "w") as f:
        for i in range(n):
            f.write(json.dumps({"timestamp": 1700000000 + span_s * i / n,
                                "messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 2}) + "\n")


def _check(run_dir) -> dict:
    return next(c for c in report(run_dir)["checks"] if c["name"] == "replay sent every request of the log")


def test_a_replay_cut_short_by_the_duration_fails_the_run(tmp_path):
    _log(tmp_path)
    run_dir = tmp_path / "run"
    r = chaos_run(write(tmp_path, EXP.format(name="short", duration="3s")), run_dir)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    c = _check(run_dir)
    assert c["passed"] is False and "not sent:" in c["detail"] and "duration" in c["detail"], c
    sent = int(c["measured"].split(" of ")[0])
    assert 0 < sent < 40 and c["measured"].endswith("of 40 sent")
    assert leftovers(run_dir) == []


def test_a_replay_sent_whole_passes(tmp_path):
    _log(tmp_path, span_s=4.0)  # the run ends once the log is sent: 40 requests over 4 s, not 8, well within 20 s
    run_dir = tmp_path / "run"
    r = chaos_run(write(tmp_path, EXP.format(name="whole", duration="20s")), run_dir)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    c = _check(run_dir)
    assert c["passed"] is True and c["measured"] == "40 of 40 sent", c
