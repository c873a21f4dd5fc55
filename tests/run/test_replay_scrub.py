"""A scrubbed replay inside an experiment run (load.replay_scrub): no secret or personal value of the log reaches
any file of the run directory (journal, records, server logs, reports, Locust's files), and the report's notes
give the scrub report: counts per kind, never values."""

from tests.load.pii_log import leaks, write_pii_log

from .conftest import leftovers, report
from .test_runs import chaos_run, write

EXP = """\
name: replay-scrubbed
target: {kind: reference, replicas: 1, preset: tiny, startup_timeout: 30s}
load: {workload: replay, replay: pii.jsonl, replay_speed: 4, replay_scrub: true, duration: 20s,
        timeouts: {connect: 2s, first_token: 5s, total: 10s}}
verify:
  status_codes: {allowed: [200]}
"""


def test_a_scrubbed_replay_run_stores_no_secret_anywhere(tmp_path):
    n = write_pii_log(tmp_path / "pii.jsonl")
    run_dir = tmp_path / "run"
    r = chaos_run(write(tmp_path, EXP), run_dir)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rep = report(run_dir)
    assert rep["requests"] == n
    assert leaks(run_dir) == []
    assert not [x for x in ("alice.smith", "4111 1111", "203.0.113.42") if x in r.stdout + r.stderr]
    scrub = [x for x in rep["notes"] if x.startswith("scrub: ")]
    assert scrub and scrub[0].startswith("scrub: 120 values redacted") and "email 24" in scrub[0], rep["notes"]
    assert leftovers(run_dir) == []
