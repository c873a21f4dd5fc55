"""Game days end to end with real runs (tiny, one replica, a few seconds each): a scheduled game day killed outright
and resumed (the run it left finishing on its own is taken as it is), which then finishes with a failing member
that does not stop the rest, the combined report (md, html, junit) and the history; the lock; an interrupted game
day reporting what it did not run; and a killed game day found by the next one and reported with what it did not
run. The --every/--times loop itself (how many game days, which exit code) is checked without runs."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import psutil
import pytest

pytestmark = pytest.mark.slow

OK = """name: ok
vars: {DUR: 5s}
target: {kind: reference, replicas: 1, preset: tiny}
load: {workload: chat, users: 2, duration: "${DUR}", output_tokens: 4-8}
steady_state: {window: 2s, slo: {p95_latency: 10s}}
"""
BAD = """name: bad
target: {kind: reference, replicas: 1, preset: tiny}
load: {workload: chat, users: 2, duration: 3s, output_tokens: 4-8}
verify:
  slo_after: {p95_latency: 1ms}
"""
SUITE = """name: nightly
vars: {DUR: "${DUR}"}
experiments:
  - {file: ok.yaml}
  - {file: bad.yaml}
"""


def chaos(*args, cwd, timeout=240, **kw):
    return subprocess.run([sys.executable, "-m", "chaos", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, **kw)


def suite(d, dur):
    (d / "ok.yaml").write_text(OK)
    (d / "bad.yaml").write_text(BAD)
    (d / "suite.yaml").write_text(SUITE.replace("${DUR}", dur))
    return str(d / "suite.yaml")


def days(folder):
    if not os.path.isdir(folder):  # not yet: the first game day makes it
        return []
    return sorted(p for p in os.listdir(folder) if p[0].isdigit())


def state(folder, day):
    return json.loads(open(os.path.join(folder, day, "gameday.json")).read())


def journaled(path, event):
    """Whether a run's journal (chaos.rundir.journal) holds this event yet."""
    try:
        with open(path) as f:
            return any(f'"event": "{event}"' in line for line in f)
    except OSError:
        return False


def wait_for(pred, timeout, what):
    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < timeout, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("gd")
    out = d / "gamedays"
    # 1. on a schedule (croniter's sixth field is seconds: the next second), killed outright mid-run, the lock held
    #    meanwhile, then resumed: the resumed game day runs the failing member and finishes (asserted on as the
    #    game day with a failing member; --times 1 only ends it should the kill below never come)
    long_suite = suite(d, "14s")
    with open(d / "scheduled.out", "w") as log:
        g = subprocess.Popen([sys.executable, "-m", "chaos", "gameday", long_suite, "--out", str(out), "--every",
                              "* * * * * *", "--times", "1"], cwd=d, stdout=log, stderr=subprocess.STDOUT)
    wait_for(lambda: len(days(out)) == 1 and os.path.exists(out / days(out)[0] / "runs" / "ok" / "journal.jsonl"),
             90, "the scheduled game day's first run")
    locked = chaos("gameday", long_suite, "--out", str(out), cwd=d, timeout=60)
    g.send_signal(signal.SIGKILL)
    g.wait(10)
    killed_day = days(out)[0]
    run_dir = out / killed_day / "runs" / "ok"
    orphan = json.loads((out / killed_day / "gameday.json").read_text())["child"]["pid"]
    wait_for(lambda: os.path.exists(run_dir / "report.json"), 90, "the orphaned run to finish by itself")
    wait_for(lambda: not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE, 60,
             "the orphaned run to exit")
    # a copy of the killed state, found and reported as killed by the next game day (the resume below)
    ghost = out / "20000101T000000Z"
    shutil.copytree(out / killed_day, ghost, ignore=shutil.ignore_patterns("runs"))
    doc = json.loads((ghost / "gameday.json").read_text())
    doc.update(pid=2**22 + 7, dir=str(ghost))  # a pid no process has
    (ghost / "gameday.json").write_text(json.dumps(doc))
    resumed = chaos("gameday", long_suite, "--resume", str(out / killed_day), cwd=d)
    # 2. interrupted (SIGINT) during its first run, once that run takes signals (its handlers are in place before
    #    it journals target_starting)
    g = subprocess.Popen([sys.executable, "-m", "chaos", "gameday", long_suite, "--out", str(out)], cwd=d,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: len(days(out)) == 3 and journaled(out / days(out)[2] / "runs" / "ok" / "journal.jsonl",
                                                       "target_starting"),
             90, "the interrupted game day's first run")
    g.send_signal(signal.SIGINT)
    stdout, stderr = g.communicate(timeout=90)
    return {"out": out, "scheduled": (d / "scheduled.out").read_text(), "locked": locked, "killed_day": killed_day,
            "resumed": resumed, "interrupted": (g.returncode, stdout, stderr), "ghost": ghost}


def test_a_failing_member_does_not_stop_the_rest_and_the_report_has_each_verdict(folder):
    # the resumed game day: ok finished by itself after the kill, bad was run by the resume
    out, r = folder["out"], folder["resumed"]
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "next game day at" in folder["scheduled"]  # it was started on a schedule
    day = folder["killed_day"]
    assert days(out)[1] == day  # the ghost sorts first
    doc = state(out, day)
    assert doc["status"] == "finished" and [x["name"] for x in doc["runs"]] == ["ok", "bad"]
    assert [x["exit_code"] for x in doc["runs"]] == [0, 1] and doc["not_run"] == []
    ok, bad = doc["runs"]
    assert ok["score"] == 100.0 and bad["score"] < 100.0
    assert doc["score"] == round((ok["score"] + bad["score"]) / 2, 1)
    md = (out / day / "gameday.md").read_text()
    assert "| ok | passed | 100 |" in md and "runs/bad/report.md" in md and f"resilience score {doc['score']}" in md
    assert (out / day / "runs" / "ok" / "report.json").exists()
    cases = {c.get("name"): c for c in ET.parse(out / day / "junit.xml").getroot().iter("testcase")}
    assert cases["ok"].find("failure") is None and cases["bad"].find("failure") is not None
    html = (out / day / "gameday.html").read_text()
    assert 'href="runs/ok/report.html"' in html and "Key figures across game days" in html


def test_the_lock_refuses_an_overlapping_game_day(folder):
    r = folder["locked"]
    assert r.returncode == 2 and "another game day of this suite is running" in r.stderr


def test_a_killed_game_day_resumes_taking_the_run_that_finished_by_itself(folder):
    out, r = folder["out"], folder["resumed"]
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "ok: finished after the game day was killed" in r.stdout
    doc = state(out, folder["killed_day"])
    assert doc["status"] == "finished" and [x["name"] for x in doc["runs"]] == ["ok", "bad"]
    assert doc["runs"][0]["exit_code"] == 0 and doc["not_run"] == []


def test_an_interrupted_game_day_reports_what_it_did_not_run(folder):
    out = folder["out"]
    code, stdout, stderr = folder["interrupted"]
    assert code == 130, stdout[-2000:] + stderr[-2000:]
    doc = state(out, days(out)[2])
    assert doc["status"] == "interrupted" and doc["not_run"] == ["bad"]
    assert doc["runs"][0]["exit_code"] == 130
    md = (out / days(out)[2] / "gameday.md").read_text()
    assert "**not run (interrupted):** bad" in md
    # the interrupted run rolled back and wrote its partial report
    assert json.loads((out / days(out)[2] / "runs" / "ok" / "report.json").read_text())["verdict"] == "interrupted"


def test_a_killed_game_day_is_found_by_the_next_and_reported_with_what_it_did_not_run(folder):
    doc = json.loads((folder["ghost"] / "gameday.json").read_text())
    assert doc["status"] == "killed" and doc["not_run"] == ["ok", "bad"]
    assert "**not run (killed):** ok, bad" in (folder["ghost"] / "gameday.md").read_text()


def test_the_history_keeps_every_game_day_and_the_trend_with_intervals(folder):
    out = folder["out"]
    db = sqlite3.connect(out / "history.sqlite")
    rows = db.execute("SELECT status FROM gameday ORDER BY id").fetchall()
    # the ghost, reported killed by the resume before it ran; the resumed game day; the interrupted one
    assert [r[0] for r in rows] == ["killed", "finished", "interrupted"]
    figs = db.execute("SELECT DISTINCT figure FROM figure WHERE experiment = 'ok'").fetchall()
    assert ("E2E P99, whole run",) in figs
    with_interval = db.execute("SELECT COUNT(*) FROM figure WHERE low IS NOT NULL").fetchone()[0]
    assert with_interval > 0
    last = out / days(out)[2]
    html = (last / "gameday.html").read_text()
    n = int(html.split('name="chaos-figures" content="')[1].split('"')[0])
    assert n >= 3  # the score's trend and at least two key figures'


def test_every_runs_a_game_day_at_each_fire_time_and_times_stops_the_loop(tmp_path, monkeypatch, capsys):
    """`--every CRON --times N`: N game days, each announced, then the exit code of the last; no runs here (the
    fixture above starts a real one on a schedule)."""
    import chaos.gameday.cli as gcli
    import chaos.gameday.runner as grunner
    from chaos.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TZ", "UTC")  # cmd_gameday sets it when absent
    suite_file = suite(tmp_path, "5s")
    fired = []

    def next_fire(cron, after):
        fired.append(cron)
        return after  # due at once: the loop does not sleep

    calls = []

    def run_gameday(s, folder, progress, resume=None):
        calls.append((s.name, folder, resume))
        if len(calls) > 2:  # --times not honoured: end the loop here rather than hang
            raise KeyboardInterrupt
        runs = [{"name": "ok", "exit_code": 0}, {"name": "bad", "exit_code": 1 if len(calls) == 2 else 0}]
        return {"suite": s.name, "status": "finished", "runs": runs, "not_run": [], "score": 100.0, "passed": 2,
                "experiments": 2, "dir": str(tmp_path / "o" / f"day{len(calls)}")}

    monkeypatch.setattr(gcli, "next_fire", next_fire)
    monkeypatch.setattr(grunner, "run_gameday", run_gameday)
    old = signal.getsignal(signal.SIGTERM)
    try:
        code = main(["gameday", suite_file, "--out", str(tmp_path / "o"), "--every", "* * * * * *", "--times", "2"])
    finally:
        signal.signal(signal.SIGTERM, old)  # cmd_gameday takes SIGTERM as an interrupt
    out = capsys.readouterr().out
    assert calls == [("nightly", str(tmp_path / "o"), None)] * 2 and fired == ["* * * * * *"] * 2
    assert out.count("next game day at") == 2 and out.count("game day nightly: finished") == 2
    assert code == 1  # the last game day's: one member failed
