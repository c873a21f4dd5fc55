"""`chaos replay LOGFILE TARGET` end to end: against a real reference server by URL, and against a target file it
starts and stops. Broken lines are reported by line number, failures by source line, scrubbed values never
stored, and the exit status says whether every request was sent."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.load.pii_log import SECRETS, leaks
from tests.run.conftest import writers


def chaos_replay(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "chaos", "replay", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def write_log(path, n=20) -> None:
    """n chat requests over 1 s carrying an e-mail; line 7 is broken JSON, line 12 has empty messages (a 400)."""
    rows = []
    for i in range(n):
        rows.append(json.dumps({"timestamp": 1000 + i * 0.05, "max_tokens": 3,
                                "messages": [{"role": "user", "content": f"q {i} {SECRETS['email']}"}]}))
        if i == 5:
            rows.append('{"timestamp": 1000.3, "messages": [')
        if i == 9:
            rows.append(json.dumps({"timestamp": 1000.5, "messages": [], "max_tokens": 3}))
    path.write_text("\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def reference():
    from chaos.reference.launcher import start_server

    with start_server(["--preset", "tiny", "--replica-id", "R0"]) as s:
        yield s


@pytest.mark.slow
def test_a_timed_scrubbed_replay_by_url_reports_broken_lines_and_failures_by_line(tmp_path, reference):
    log = tmp_path / "log.jsonl"
    write_log(log)
    out = tmp_path / "out"
    p = chaos_replay(log, reference.base_url, "--speed", 4, "--scrub", "--out", out, "--interval", 0)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "sent 21 of 21, not sent 0, filtered 0, unreadable lines 1 (lines 7)" in p.stdout
    assert "failed requests by source line (1): line 12 (400 " in p.stdout
    assert "lag (actual - intended send) p50/p99/max:" in p.stdout
    assert "status codes: 200x20, 400x1" in p.stdout
    s = json.load(open(out / "replay-summary.json"))
    assert (s["mode"], s["window"], s["sent"], s["not_sent"], s["unreadable_lines"]) == ("timed", 21, 21, 0, [7])
    assert [x["line"] for x in s["failed"]["lines"]] == [12] and s["failed"]["lines"][0]["status"] == 400
    assert s["scrub"] == {"email": 20, "total": 20} and set(s["lag"]) == {"p50", "p99", "max"}
    assert leaks(out) == [] and SECRETS["email"] not in p.stdout


@pytest.mark.slow
def test_fast_sends_the_first_max_requests_once_and_a_lost_replay_exits_1(tmp_path, reference):
    log = tmp_path / "log.jsonl"
    write_log(log)
    p = chaos_replay(log, reference.base_url, "--fast", "--users", 2, "--max-requests", 8, "--no-stream",
                     "--out", tmp_path / "fast", "--interval", 0)
    assert p.returncode == 0, p.stdout + p.stderr
    s = json.load(open(tmp_path / "fast" / "replay-summary.json"))
    assert (s["mode"], s["window"], s["sent"], s["not_sent"]) == ("fast", 8, 8, 0)
    records = [json.loads(x) for x in open(tmp_path / "fast" / "requests.jsonl")]
    assert sorted(r["source_line"] for r in records) == [1, 2, 3, 4, 5, 6, 8, 9]  # line 7 is broken
    assert {r["stream"] for r in records} == {False}
    # the log spans 1 s; at 0.5x it needs 2 s, and the replay may take 1 s: what was not sent fails it
    p = chaos_replay(log, reference.base_url, "--speed", 0.5, "--duration", "1s", "--out", tmp_path / "cut",
                     "--interval", 0)
    assert p.returncode == 1, p.stdout + p.stderr
    s = json.load(open(tmp_path / "cut" / "replay-summary.json"))
    assert s["not_sent"] > 0 and s["sent"] + s["not_sent"] == s["window"] == 21
    assert p.stdout.splitlines()[2].startswith(f"REPLAY INCOMPLETE: not sent {s['not_sent']} of 21")


def test_a_remote_url_is_refused_without_allow_remote(tmp_path):
    log = tmp_path / "log.jsonl"
    write_log(log, 2)
    p = chaos_replay(log, "http://192.0.2.10:8000", "--out", tmp_path / "o")
    assert p.returncode == 2 and "--allow-remote" in p.stderr
    p = chaos_replay(log, tmp_path / "nothing.yaml", "--out", tmp_path / "o")
    assert p.returncode == 2 and "neither a URL" in p.stderr


@pytest.mark.slow
@pytest.mark.beside  # judges state, not time
def test_a_target_file_is_started_replayed_against_and_stopped(tmp_path):
    log = tmp_path / "log.jsonl"
    write_log(log, 10)
    out = tmp_path / "out"
    target = os.path.join(os.path.dirname(__file__), "..", "..", "targets", "reference.yaml")
    p = chaos_replay(log, target, "--var", "PRESET=tiny", "--speed", 4, "--out", out, "--interval", 0)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "starting the target reference-2x-gateway" in p.stdout and "stopping the target" in p.stdout
    s = json.load(open(out / "replay-summary.json"))
    assert (s["sent"], s["not_sent"], s["unreadable_lines"]) == (11, 0, [7])
    assert s["status_codes"] == {"200": 10, "400": 1}
    served = {json.loads(x)["served_by"] for x in open(out / "requests.jsonl")}
    assert served & {"r0", "r1"}, served  # through the gateway, to its replicas
    assert writers(out) == []  # every process it started (replicas, gateway, Locust) is gone


def _replay_in_flight(tmp_path):
    """`chaos replay` of a log against a target file it starts, once a replayed request is on record (sent,
    answered) while the last one is still owed: (process, out folder)."""
    log = tmp_path / "log.jsonl"
    write_log(log, 10)  # 11 requests within 0.5 s of each other ...
    with open(log, "a") as f:  # ... and a 12th an hour later: the replay cannot be over when the signal comes,
        # however slow this machine is (a Ctrl-C timed by the clock once came after every request was sent)
        f.write(json.dumps({"timestamp": 1000 + 3600, "max_tokens": 3,
                            "messages": [{"role": "user", "content": "the last"}]}) + "\n")
    out = tmp_path / "out"
    records = out / "requests.jsonl"
    target = os.path.join(os.path.dirname(__file__), "..", "..", "targets", "reference.yaml")
    p = subprocess.Popen([sys.executable, "-m", "chaos", "replay", str(log), target, "--var", "PRESET=tiny",
                          "--speed", "1", "--out", str(out), "--interval", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    # The state the signal needs, not a time. The deadline only bounds a replay that never gets going.
    deadline = time.monotonic() + 240
    while not (records.exists() and records.stat().st_size) and p.poll() is None:
        if time.monotonic() > deadline:
            _stop(p)
            raise AssertionError("no replayed request was recorded within 240 s")
        time.sleep(0.1)
    if p.poll() is not None:
        raise AssertionError(p.communicate()[0])
    assert writers(out), "the target should be up"
    return p, out


def _stop(p) -> None:
    if p.poll() is None:
        p.terminate()  # SIGTERM stops the target it started too; a kill would leave that running
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


@pytest.mark.slow
@pytest.mark.beside  # judges state, not time
def test_ctrl_c_stops_the_replay_and_the_target_it_started(tmp_path):
    p, out = _replay_in_flight(tmp_path)
    try:
        p.send_signal(signal.SIGINT)
        text = p.communicate(timeout=120)[0]
    finally:
        _stop(p)
    assert p.returncode == 130, text
    assert "stopping the target" in text
    s = json.load(open(out / "replay-summary.json"))
    assert s["interrupted"] and 0 < s["sent"] < s["window"] and s["not_sent"] == s["window"] - s["sent"], s
    assert writers(out) == []  # replicas, gateway and Locust all stopped
    events = [json.loads(x)["event"] for x in open(out / "journal.jsonl")]
    assert events[0] == "run_started" and events[-1] == "target_stopped", events


@pytest.mark.slow
@pytest.mark.beside  # judges state, not time
def test_a_killed_replay_is_stopped_by_recover(tmp_path):
    """SIGKILLed, the replay cannot stop what it started: its journal and mark let `chaos recover` do it."""
    p, out = _replay_in_flight(tmp_path)
    p.kill()
    p.communicate(timeout=30)
    assert writers(out), "the replicas, the gateway and Locust outlive a SIGKILLed replay"
    r = subprocess.run([sys.executable, "-m", "chaos", "recover", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stopped instance r0" in r.stdout and "stopped instance gw" in r.stdout, r.stdout
    assert writers(out) == []
    s = json.load(open(out / "replay-summary.json"))
    assert s["interrupted"] and s["killed"] and s["records"] >= 1, s
