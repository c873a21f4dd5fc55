"""experiments/malformed-replay.yaml in its short mode against the real reference target (targets/reference.yaml:
two tiny replicas behind the gateway): it passes; its broken lines are reported by line number and were never
fatal; the 400s came from exactly the abnormal lines of the log and everything else got a 200; and none of the
log's fake secrets or personal data (every kind the scrubber knows, in headers and text) reached any file of the
run: a chaos run of a log full of such values, scrubbed (load.replay_scrub)."""

import json
import os

import pytest

from .test_runs import Run, run_once

pytestmark = pytest.mark.slow  # one whole run, asserted on by each test

EXP = "experiments/malformed-replay.yaml"
LOG = "experiments/data/malformed-requests.jsonl"
SHORT = ["--var", "SPEED=10", "--var", "LOAD_FOR=15s", "--var", "PRESET=tiny"]
# the log's fake secrets and personal data, one of each kind (the values, and prefixes that only the values have)
FAKES = ["jane.doe", "m.rossi", "@example.com", "@example.org", "4111 1111 1111 1111",
         "198.51.100.", "sk-live-", "sk-proj-", "sk-test-", "Qw8Er7Ty6Ui5Op4As3", "11010519491231002X", "+44 20 7946",
         "(555) 201-"]
KINDS = ("authorization", "api_key", "email", "ipv4", "id_card", "card", "phone")


def expected() -> tuple[list[int], set[int], int]:
    """From the log itself, read here by hand: (broken lines, lines that must get a 400, lines in all)."""
    broken, bad, n = [], set(), 0
    for lineno, line in enumerate(open(LOG, encoding="utf-8"), 1):
        n += 1
        try:
            e = json.loads(line)
        except ValueError:
            broken.append(lineno)
            continue
        body = e.get("request", {}).get("body") if isinstance(e, dict) and "request" in e else e
        if isinstance(body, str):
            try:
                body = json.loads(body)
            except ValueError:
                body = None
        if (not isinstance(body, dict) or ("messages" not in body and "prompt" not in body)
                or not isinstance(e.get("timestamp"), (int, float))):
            broken.append(lineno)
        elif str(e.get("case", "")).startswith("bad-"):
            bad.add(lineno)
    return broken, bad, n


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> Run:
    broken, bad, n = expected()
    assert len(broken) == 10 and len(bad) == 26 and n == 286  # what the experiment's description says
    raw = open(LOG, "rb").read()
    assert all(f.encode() in raw for f in FAKES)  # the needles are in the log: their absence below means something
    run = run_once(tmp_path_factory, "malformed-replay", EXP, *SHORT, timeout=150)
    assert run.r.returncode == 0, run.r.stdout[-3000:] + run.r.stderr[-2000:]
    return run


def test_the_malformed_replay_passes_with_broken_lines_reported_and_400s_from_the_abnormal_lines(replayed):
    broken, bad, n = expected()
    rep = replayed.report()
    assert rep["verdict"] == "passed"
    checks = {c["name"]: c for c in rep["checks"]}
    sent = checks["replay sent every request of the log"]
    assert sent["passed"] and sent["measured"] == f"{n - len(broken)} of {n - len(broken)} sent", sent
    assert f"unreadable lines skipped: {len(broken)} (lines {', '.join(map(str, broken))})" in sent["detail"]
    assert checks["status codes"]["passed"] and checks["status codes"]["measured"] == f"200x{n - 36}, 400x26"
    records = replayed.records()
    assert len(records) == n - len(broken)
    assert {r["source_line"] for r in records if r["status"] == 400} == bad
    assert all(r["status"] == 200 for r in records if r["source_line"] not in bad)
    assert not {r["source_line"] for r in records} & set(broken)


def test_the_failed_lines_and_the_scrub_counts_are_in_the_notes(replayed):
    _, bad, _ = expected()
    notes = replayed.report()["notes"]
    first_bad = sorted(bad)[:3]
    failed = next(x for x in notes if x.startswith("replayed requests that failed: "))
    assert failed.startswith("replayed requests that failed: " + ", ".join(f"line {x} (400 " for x in first_bad[:1]))
    assert all(f"line {x} (400 " in failed for x in first_bad) and failed.endswith("... and 16 more")
    scrub = next(x for x in notes if x.startswith("scrub: "))  # counts per kind, never values
    assert all(f"{k} " in scrub for k in KINDS), scrub


def test_no_secret_of_the_log_reaches_any_file_or_output_and_nothing_is_left(replayed):
    leaked = []
    for root, _, files in os.walk(replayed.dir):  # every file of the run: journal, records, server logs, reports
        for name in files:
            data = open(os.path.join(root, name), "rb").read()
            leaked += [f"{name}: {f}" for f in FAKES + ["4111111111111111"] if f.encode() in data]
    assert leaked == []
    assert not [f for f in FAKES if f in replayed.r.stdout + replayed.r.stderr]
    assert replayed.left == []
