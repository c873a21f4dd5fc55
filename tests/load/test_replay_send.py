"""A timed replay sends every request of its log window exactly once, in time order, at its time; what it does
not send it counts, and a loss fails the run. Real Locust against a real server on loopback that reads each body.

The logs are bursty as production is: bursts of 60 requests within 200 ms after lulls of 1-1.8 s, the last burst
after a lull (where the old replay lost its requests: its budget check ended the run while they still slept).
Ordering tolerance: the client sends strictly in intended-time order (checked from the records); the server may
see requests of the same burst race over different connections, so there an arrival may precede one intended
earlier by at most ORDER_TOLERANCE_S, well under the shortest scaled lull.
"""

import collections
import json
import os
import subprocess
import sys
import time

import pytest

from chaos.load.driver import LoadConfig, run_load
from chaos.load.accounts import ReplayAccount, merge_accounts
from chaos.records import read_records
from chaos.load.shapes import replay
from chaos.load.replay.log import iter_replay
from chaos.load.workloads import WorkloadSpec

from .scripted_server import ScriptedServer

BURST_STARTS = (0.0, 1.2, 3.0, 4.5, 6.5)  # seconds in the log; each burst: 60 requests over 200 ms
PER_BURST = 60
ORDER_TOLERANCE_S = 0.1


class CountingServer(ScriptedServer):
    """Answers every request with one token and keeps (arrival, log line) from the body it received."""

    def __init__(self):
        super().__init__("ok", tokens=1)
        self.seen: list[tuple[float, int]] = []

    async def _respond(self, writer, body, headers):
        content = body["messages"][0]["content"]
        self.seen.append((time.monotonic(), int(content.split()[1])))
        return await super()._respond(writer, body, headers)


def bursty_log(path) -> dict[int, float]:
    """Writes the log (line n carries "line n" in its body); returns {line: offset in the log}."""
    offsets, lines = {}, []
    for b, start in enumerate(BURST_STARTS):
        for k in range(PER_BURST):
            lineno = len(lines) + 1
            offsets[lineno] = start + 0.2 * k / PER_BURST
            lines.append(json.dumps({"timestamp": 1_700_000_000 + offsets[lineno], "max_tokens": 2,
                                     "messages": [{"role": "user", "content": f"line {lineno} burst {b}"}]}))
    path.write_text("\n".join(lines) + "\n")
    return offsets


@pytest.mark.slow  # real processes for seconds: the whole suite runs it, not the unit tier
def test_bursty_log_is_sent_whole_once_and_in_order_with_max_requests_equal_to_its_length(tmp_path):
    log = tmp_path / "bursty.jsonl"
    offsets = bursty_log(log)
    speed = 4.0
    # a stop timeout shorter than the scaled lulls, as a 10 s one is against a real trace's minute-long silences:
    # the old replay ended its run there (budget spent, nothing in flight) and killed the sleepers (120 of 300)
    plan = replay(20.0, speed=speed, max_users=128, max_requests=len(offsets), stop_timeout=0.2)
    with CountingServer() as srv:
        cfg = LoadConfig(target=srv.url, plan=plan,
                         workload=[(WorkloadSpec("replay", replay_file=str(log)), 1.0)], out_dir=str(tmp_path / "o"))
        t = time.monotonic()
        result = run_load(cfg, progress=lambda line: None)
        elapsed = time.monotonic() - t
        seen = list(srv.seen)
    counts = collections.Counter(line for _, line in seen)
    assert set(counts) == set(offsets)  # every line of the log, the final burst included
    assert set(counts.values()) == {1}  # each exactly once
    acc = result.replay
    assert (acc["window"], acc["sent"], acc["not_sent"]) == (300, 300, 0)
    assert acc["out_of_order"] == 0
    assert "REPLAY INCOMPLETE" not in result.table() and "replay: sent 300 of 300, not sent: 0" in result.table()
    assert set(acc["lag"]) == {"p50", "p99", "max"}
    assert elapsed < 15  # the run ended with the log, not with its 20 s plan

    records = read_records(result.records_path)
    assert sorted(r.source_line for r in records) == sorted(offsets)
    assert all(r.outcome == "ok" for r in records)
    by_line = {r.source_line: r for r in records}
    t0 = by_line[1].t_sched
    for line, off in offsets.items():  # intended times are the log's, scaled, from one start
        assert abs(by_line[line].t_sched - t0 - off / speed) < 1e-6
    # the server side: no request arrives before one intended more than the tolerance earlier
    ordered = [offsets[line] / speed for _, line in sorted(seen)]
    latest = float("-inf")
    for intended in ordered:
        assert intended > latest - ORDER_TOLERANCE_S
        latest = max(latest, intended)
    # bursts are kept, not smoothed: the last burst (50 ms scaled) goes out well within the lull before it
    last = [by_line[n].t_start for n in offsets if n > 4 * PER_BURST]
    lull = (BURST_STARTS[-1] - BURST_STARTS[-2] - 0.2) / speed
    assert max(last) - min(last) < lull / 2


@pytest.mark.slow
def test_a_replay_whose_duration_ends_before_the_log_reports_not_sent_and_exits_1(tmp_path):
    log = tmp_path / "bursty.jsonl"
    offsets = bursty_log(log)
    speed, duration = 2.0, 2.0  # the scaled log is 3.35 s; 2 s ends in the lull after the third burst
    due = {n for n, off in offsets.items() if off / speed < duration}
    assert len(due) == 3 * PER_BURST
    out = tmp_path / "cli"
    with CountingServer() as srv:
        p = subprocess.run([sys.executable, "-m", "chaos", "load", srv.url, "--replay", str(log), "--replay-speed",
                            str(speed), "--duration", f"{duration}s", "--out", str(out), "--interval", "0"],
                           capture_output=True, text=True, timeout=90)
        seen = [line for _, line in srv.seen]
    assert p.returncode == 1, p.stdout + p.stderr
    assert sorted(seen) == sorted(due)  # what was due went out, once each
    lost = len(offsets) - len(due)
    table = p.stdout[p.stdout.index("target "):]
    first = table.splitlines()[1]  # right under the target line, before the metrics table
    assert first.startswith(f"REPLAY INCOMPLETE: not sent: {lost} of {len(offsets)}"), table
    assert "duration" in first
    with open(os.path.join(out, "summary.json")) as f:
        acc = json.load(f)["replay"]
    assert acc["not_sent"] == lost and acc["not_sent_by_reason"] == {"duration": lost}
    assert acc["sent"] == len(due)
    assert "not sent" in p.stderr


def test_the_log_is_streamed_in_time_order_and_a_broken_line_is_counted_not_fatal(tmp_path):
    log = tmp_path / "shuffled.jsonl"
    stamps = [10.0, 9.5, 11.0, 10.5, 12.0]  # nearly sorted, as logs written by several threads are
    rows = [json.dumps({"timestamp": t, "prompt": f"p{i}"}) for i, t in enumerate(stamps)]
    rows.insert(2, "{not json")
    log.write_text("\n".join(rows) + "\n")
    items = list(iter_replay(str(log), passes=2, window=3))
    readable = [i for i in items if i.entry is not None]
    assert [i.offset_s for i in readable[:5]] == [0.0, 0.5, 1.0, 1.5, 2.5]  # from the earliest, sorted
    assert readable[5].offset_s == 2.5 + 1.0  # the second pass follows the first's span
    broken = [i for i in items if i.entry is None]
    assert [i.lineno for i in broken] == [3, 3] and "not JSON" in broken[0].error


def test_what_no_process_accounted_for_is_not_sent():
    a = ReplayAccount("w0", window=10, sent=7, done=True)
    acc = merge_accounts([a], window=20)  # a worker that died wrote nothing: its 10 are lost, not forgotten
    assert acc["not_sent"] == 13 and acc["not_sent_by_reason"] == {"interrupted": 13}
    b = ReplayAccount("w0", window=8, sent=7, cut="duration", done=True)
    b.miss("duration", 42)
    acc = merge_accounts([b], window=20)
    assert acc["not_sent_by_reason"] == {"duration": 13} and acc["first_not_sent"] == [42]
